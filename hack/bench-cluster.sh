#!/usr/bin/env bash
# Measures a local cluster in one run: create time (3 control planes + 1 worker, to healthy),
# idle RSS of each node's processes, and talosctl round trips through apid to 1 and 4 nodes
# (median of 20, including talosctl's own start-up).
set -euo pipefail
cd "$(dirname "$0")/.."

out=$(mktemp -d)
go build -o "$out/" ./cmd/machined ./cmd/talosctl ./cmd/etcd

# A private HOME keeps the cluster and its talosconfig out of the user's (after the build, so
# the Go module cache stays the user's).
export HOME=$(mktemp -d)
trap '"$out/talosctl" cluster destroy --name bench >/dev/null 2>&1 || true; rm -rf "$out" "$HOME"' EXIT

start=$(date +%s%N)
"$out/talosctl" cluster create --name bench --controlplanes 3 --workers 1 --cidr 127.5.60.0/24 >/dev/null
end=$(date +%s%N)
echo "cluster create (3 control planes + 1 worker, to healthy): $(( (end - start) / 1000000 )) ms"

sleep 5
echo
# The node's whole process tree: the boot stage, machined under it, and machined's services.
tree() {
  echo "$1"
  for child in $(pgrep -P "$1" || true); do tree "$child"; done
}

echo "idle RSS per node (the boot stage, machined and its services: apid, trustd, etcd):"
"$out/talosctl" cluster show --name bench | awk '/running/ {print $1, $4}' | while read -r name pid; do
  total=0
  detail=""
  for p in $(tree "$pid"); do
    rss=$(awk '/VmRSS/ {print $2}' /proc/$p/status 2>/dev/null || echo 0)
    comm=$(tr '\0' ' ' < /proc/$p/cmdline | awk '{print ($2 ~ /^(apid|trustd|boot)$/) ? $2 : $1}' | xargs basename)
    total=$((total + rss))
    detail="$detail $comm=$((rss / 1024))MB"
  done
  echo "  $name: $((total / 1024)) MB ($detail )"
done

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
timeit() {
  for _ in $(seq 20); do
    s=$(date +%s%N); "$out/talosctl" "$@" >/dev/null; e=$(date +%s%N)
    echo $(( (e - s) / 1000 ))
  done | median
}

echo
one=$(timeit -e 127.5.60.2 -n 127.5.60.2 version)
four=$(timeit -e 127.5.60.2 -n 127.5.60.2,127.5.60.3,127.5.60.4,127.5.60.5 version)
echo "talosctl version through apid, median of 20: 1 node ${one} us, 4 nodes ${four} us, ratio $(awk "BEGIN {printf \"%.2f\", $four / $one}")"
