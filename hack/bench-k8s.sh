#!/usr/bin/env bash
# Kubernetes to Ready on the container provisioner: cluster create until every node is Ready and
# the system pods are up (the same wait as `cluster create`), and when every node was Ready, for
# 1 control plane + 1 worker and 3 + 1, with the RSS of each node's process tree after. Goals (2 cores): 1 + 1 under 45 s, 3 + 1
# under 90 s. Needs root and the node image of `make rootfs`; runs in a private network namespace.
set -euo pipefail
cd "$(dirname "$0")/.."

[ "$(id -u)" = 0 ] || { echo "needs root (the container provisioner)" >&2; exit 1; }

if [ -z "${BENCH_NETNS:-}" ]; then
  exec env BENCH_NETNS=1 unshare -n sh -c 'ip link set lo up && exec "$0" "$@"' "$0" "$@"
fi

image=${IMAGE:-$PWD/_out/rootfs.sqsh}
unsquashfs -l "$image" | grep -q 'usr/share/talos/images/kubernetes.tar$' ||
  { echo "$image carries no Kubernetes: build it with make rootfs" >&2; exit 1; }

out=$(mktemp -d)
CGO_ENABLED=0 go build -trimpath -ldflags=-s -o "$out/" ./cmd/machined ./cmd/talosctl

export HOME=$(mktemp -d)
cleanup() {
  "$out/talosctl" cluster destroy --name bench-k8s >/dev/null 2>&1 || true
  rm -rf "$out" "$HOME"
}
trap cleanup EXIT

tree() {
  echo "$1"
  for child in $(pgrep -P "$1" || true); do tree "$child"; done
}

for shape in "1 1" "3 1"; do
  set -- $shape
  s=$(date +%s%N)
  # Each line of progress stamped with the time since the start, to tell when every node was
  # Ready (the goal) from when the whole health check passed (system pods up, CoreDNS ready).
  "$out/talosctl" cluster create --provisioner container --name bench-k8s --controlplanes "$1" --workers "$2" \
    --image "$image" --nameservers 10.5.0.1 --wait-timeout 15m 2>&1 |
    while IFS= read -r line; do echo "$(( ($(date +%s%N) - s) / 1000000 )) $line"; done >"$out/create.log"
  [ "${PIPESTATUS[0]}" = 0 ] || { cat "$out/create.log"; exit 1; }
  e=$(date +%s%N)
  ready=$(awk '/nodes to report ready: OK/ {print $1; exit}' "$out/create.log")
  echo "$1 control plane(s) + $2 worker(s): every node Ready in ${ready:-?} ms; healthy (system pods up, CoreDNS ready) in $(( (e - s) / 1000000 )) ms"
  "$out/talosctl" cluster show --name bench-k8s | awk '/running/ {print $1, $4}' | while read -r name pid; do
    total=0
    for p in $(tree "$pid"); do
      total=$((total + $(awk '/VmRSS/ {print $2}' /proc/$p/status 2>/dev/null || echo 0)))
    done
    echo "  $name: $((total / 1024)) MB RSS"
  done
  "$out/talosctl" cluster destroy --name bench-k8s >/dev/null
done
