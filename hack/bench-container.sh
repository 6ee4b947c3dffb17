#!/usr/bin/env bash
# Container mode next to process mode in one run: cluster create time (3 control planes + 1
# worker, to healthy; the median of RUNS creates per mode), idle RSS per node, and the ratio
# (goal: container create under 2x process).
# Needs root and mksquashfs; runs itself in a private network namespace, so the container
# cluster's bridge and both clusters' addresses stay off the host's network.
set -euo pipefail
cd "$(dirname "$0")/.."

[ "$(id -u)" = 0 ] || { echo "needs root (the container provisioner); process mode alone: hack/bench-cluster.sh" >&2; exit 1; }

if [ -z "${BENCH_NETNS:-}" ]; then
  exec env BENCH_NETNS=1 unshare -n sh -c 'ip link set lo up && exec "$0" "$@"' "$0" "$@"
fi

out=$(mktemp -d)
# Static, as the node image needs them; both modes run the same binaries.
CGO_ENABLED=0 go build -trimpath -ldflags=-s -o "$out/" ./cmd/machined ./cmd/talosctl ./cmd/etcd
# The node image: IMAGE, else the real one without Kubernetes (the goal is set before Kubernetes,
# and a container cluster with it waits for Kubernetes too: hack/bench-k8s.sh measures that),
# built next to `make rootfs`'s when missing, else the development image.
image=${IMAGE:-}
if [ -z "$image" ] && [ -f _out/rootfs.sqsh ]; then
  image=$PWD/_out/rootfs-base.sqsh
  if [ ! -f "$image" ] || [ _out/rootfs.sqsh -nt "$image" ]; then
    echo "building the node image without Kubernetes: $image"
    KUBERNETES=0 ROOTFS_OUT="$image" ./hack/rootfs.sh >&2
  fi
fi
if [ -z "$image" ]; then
  image="$out/rootfs.sqsh"
  NODE_BIN_DIR=$out hack/dev-rootfs.sh "$image" >/dev/null
fi

export HOME=$(mktemp -d)
cleanup() {
  "$out/talosctl" cluster destroy --name bench-process >/dev/null 2>&1 || true
  "$out/talosctl" cluster destroy --name bench-container >/dev/null 2>&1 || true
  rm -rf "$out" "$HOME"
}
trap cleanup EXIT

ms() { echo $(( ($2 - $1) / 1000000 )); }

tree() {
  echo "$1"
  for child in $(pgrep -P "$1" || true); do tree "$child"; done
}

# rss NAME: total RSS (kB) of each node's process tree (launcher or boot stage, machined, services).
rss() {
  "$out/talosctl" cluster show --name "$1" | awk '/running/ {print $1, $4}' | while read -r name pid; do
    total=0
    for p in $(tree "$pid"); do
      total=$((total + $(awk '/VmRSS/ {print $2}' /proc/$p/status 2>/dev/null || echo 0)))
    done
    echo "$name $total"
  done
}

# The machine is noisy (one create in several takes twice as long in either mode): RUNS pairs
# (default 5), each mode once per pair, and the ratio of the medians. Each cluster is alone on
# the machine while it is created (the other mode's is destroyed first: its idle load would
# slow the create measured); the idle RSS is read from the last run's, 5 s after it is healthy.
runs=${RUNS:-5}
process_all=() container_all=()
create() { # MODE ARGS...: time one create, in ms
  local s e
  s=$(date +%s%N)
  "$out/talosctl" cluster create --name "bench-$1" --controlplanes 3 --workers 1 "${@:2}" >/dev/null
  e=$(date +%s%N)
  ms "$s" "$e"
}
for i in $(seq "$runs"); do
  "$out/talosctl" cluster destroy --name bench-container >/dev/null 2>&1 || true
  process_all+=("$(create process --cidr 127.5.61.0/24)")
  if [ "$i" = "$runs" ]; then sleep 5; rss bench-process >"$out/rss-process"; fi
  "$out/talosctl" cluster destroy --name bench-process >/dev/null

  container_all+=("$(create container --provisioner container --image "$image")")
  if [ "$i" = "$runs" ]; then sleep 5; rss bench-container >"$out/rss-container"; fi
  echo "run $i/$runs: process ${process_all[-1]} ms, container ${container_all[-1]} ms" >&2
done
median() { printf '%s\n' "$@" | sort -n | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : int((v[NR/2] + v[NR/2+1]) / 2)}'; }
process_ms=$(median "${process_all[@]}")
container_ms=$(median "${container_all[@]}")

echo "node image: $(du -h "$image" | cut -f1) ($image)"
echo "cluster create, 3 control planes + 1 worker, to healthy (median of $runs runs each):"
echo "  process:   ${process_ms} ms (${process_all[*]})"
echo "  container: ${container_ms} ms (${container_all[*]})"
echo "  ratio container/process: $(awk "BEGIN {printf \"%.2f\", $container_ms / $process_ms}") (goal: under 2)"
echo
echo "idle RSS per node (MB):"
for mode in process container; do
  while read -r name kb; do echo "  $mode $name: $((kb / 1024))"; done <"$out/rss-$mode"
done
p=$(awk '{s+=$2} END {print s}' "$out/rss-process")
c=$(awk '{s+=$2} END {print s}' "$out/rss-container")
echo "  total: process $((p / 1024)) MB, container $((c / 1024)) MB, ratio $(awk "BEGIN {printf \"%.2f\", $c / $p}")"
