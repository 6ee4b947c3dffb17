#!/usr/bin/env bash
# The headline figures of docs/performance.md in one run, each beside its goal (issue #38):
#   - Kubernetes cluster create to every node Ready and to healthy (system pods up, CoreDNS
#     ready), 1 control plane + 1 worker and 3 + 1, on the container provisioner: the median of
#     RUNS creates (default 3);
#   - each node's memory (RSS in its cgroup, idle, 30 s after health) and its services' RSS;
#   - the apid hop: Version through apid over the direct socket, beside a bare byte relay;
#   - metal boot under QEMU (TCG here), QEMU start to apid answering: the mean of 3 boots.
# It prints a table and writes it as JSON under _out/bench/ (one file per run, to compare).
# Needs root, the node image of `make rootfs` and the boot assets of `make boot` (it builds them
# when missing); SKIP_METAL=1 / SKIP_APID=1 leave those parts out. Runs in a private network
# namespace so the clusters' bridges and addresses stay off the host's network.
set -euo pipefail
cd "$(dirname "$0")/.."

[ "$(id -u)" = 0 ] || { echo "bench: needs root (the container provisioner, QEMU's network namespace)" >&2; exit 1; }

if [ -z "${BENCH_NETNS:-}" ]; then
  exec env BENCH_NETNS=1 unshare -n sh -c 'ip link set lo up && exec "$0" "$@"' "$0" "$@"
fi

runs=${RUNS:-3}
[ -f _out/rootfs.sqsh ] || { echo "bench: building the node image (make rootfs KUBERNETES=1)" >&2; make rootfs KUBERNETES=1 >&2; }
if [ -z "${SKIP_METAL:-}" ] && [ ! -f _out/boot/metal-amd64-uki.efi ]; then
  echo "bench: building the boot assets (make boot)" >&2
  make boot >&2
fi

out=$(mktemp -d)
# talosctl gets a HOME of its own; Go keeps the caller's caches and modules.
eval "$(go env -json GOPATH GOMODCACHE GOCACHE | awk -F'"' '/:/ {printf "export %s=%s\n", $2, $4}')"
export HOME=$out/home
mkdir -p "$HOME" _out/bench
cleanup() {
  "$out/talosctl" cluster destroy --name bench >/dev/null 2>&1 || true
  rm -rf "$out"
}
trap cleanup EXIT

echo "bench: building talosctl and machined" >&2
CGO_ENABLED=0 go build -trimpath -ldflags=-s -o "$out/" ./cmd/machined ./cmd/talosctl

median() { printf '%s\n' "$@" | sort -n | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : int((v[NR/2] + v[NR/2+1]) / 2)}'; }
mb() { awk -v kb="$1" 'BEGIN {printf "%d", kb / 1024}'; }

# node_memory CLUSTER NODE: the RSS (kB) of the node's cgroup (anonymous memory: what the node
# holds, not the page cache of the shared image).
node_memory() {
  local v1=/sys/fs/cgroup/memory/talos-go/$1/$2 v2=/sys/fs/cgroup/talos-go/$1/$2
  if [ -f "$v1/memory.stat" ]; then
    awk '$1 == "total_rss" {printf "%d", $2 / 1024}' "$v1/memory.stat"
  elif [ -f "$v2/memory.stat" ]; then
    awk '$1 == "anon" {printf "%d", $2 / 1024}' "$v2/memory.stat"
  else
    echo 0
  fi
}

# service_rss CLUSTER NODE: "service kB" for the node's own services, from the processes in its
# cgroup (machined is the node's /sbin/init; apid and trustd their own binaries, or the
# multi-call binary's subcommands on an older image).
service_rss() {
  local dir=/sys/fs/cgroup/memory/talos-go/$1/$2
  [ -d "$dir" ] || dir=/sys/fs/cgroup/talos-go/$1/$2
  find "$dir" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u | while read -r pid; do
    cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || continue
    rss=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status" 2>/dev/null) || continue
    case "$cmd" in
      "/sbin/init --platform"*) echo "machined ${rss:-0}" ;;
      *"init apid "* | "/usr/sbin/apid "*) echo "apid ${rss:-0}" ;;
      *"init trustd "* | "/usr/sbin/trustd "*) echo "trustd ${rss:-0}" ;;
      *"/usr/bin/containerd "*) echo "containerd ${rss:-0}" ;;
      *"etcd "*--name*) echo "etcd ${rss:-0}" ;;
      *"kubelet "*) echo "kubelet ${rss:-0}" ;;
    esac
  done
}

json=()
row() { # NAME VALUE UNIT GOAL
  printf '%-58s %12s %-4s  goal %s\n' "$1" "$2" "$3" "$4"
  json+=("$(printf '{"figure": "%s", "value": %s, "unit": "%s", "goal": "%s"}' "$1" "$2" "$3" "$4")")
}

for shape in "1 1" "3 1"; do
  set -- $shape
  ready_all=() healthy_all=()
  for i in $(seq "$runs"); do
    s=$(date +%s%N)
    # Each progress line stamped with the time since the start: when every node was Ready comes
    # from the health check's own line.
    "$out/talosctl" cluster create --provisioner container --name bench --controlplanes "$1" --workers "$2" \
      --image "$PWD/_out/rootfs.sqsh" --nameservers 10.5.0.1 --wait-timeout 15m 2>&1 |
      while IFS= read -r line; do echo "$(( ($(date +%s%N) - s) / 1000000 )) $line"; done >"$out/create.log"
    [ "${PIPESTATUS[0]}" = 0 ] || { cat "$out/create.log" >&2; exit 1; }
    e=$(date +%s%N)
    ready_all+=("$(awk '/nodes to report ready: OK/ {print $1; exit}' "$out/create.log")")
    healthy_all+=("$(( (e - s) / 1000000 ))")
    echo "bench: $1+$2 run $i/$runs: Ready ${ready_all[-1]} ms, healthy ${healthy_all[-1]} ms" >&2

    if [ "$i" = "$runs" ]; then
      cp "$out/create.log" "$out/create-$1-$2.log"
      sleep 30 # idle after health
      "$out/talosctl" cluster show --name bench | awk '/running/ {print $1}' >"$out/nodes"
      while read -r node; do
        kind=worker
        case "$node" in *controlplane*) kind=controlplane ;; esac
        echo "$kind $(node_memory bench "$node")" >>"$out/mem-$1-$2"
        service_rss bench "$node" >>"$out/svc-$1-$2"
      done <"$out/nodes"
    fi
    "$out/talosctl" cluster destroy --name bench >/dev/null
  done
  ready=$(median "${ready_all[@]}") healthy=$(median "${healthy_all[@]}")
  if [ "$1" = 1 ]; then goal_h="under 20000 (kind 1 node ~33 s, k3d ~20 s)"; else goal_h="under 35000"; fi
  row "$1+$2 create to every node Ready (median of $runs)" "$ready" ms "-"
  row "$1+$2 create to healthy (median of $runs: ${healthy_all[*]})" "$healthy" ms "$goal_h"
done

# Where the 1+1 create's time goes (its last run): create's waits run one after another, each
# line stamped when it printed, so each phase ends at its stamp (or at the previous one's, when it
# was done before create looked). The node's first lines are its launch; "apid" is machined up;
# the health checks are etcd, the API server (static pods), kubelet registration (nodes report),
# CNI (nodes ready), kube-proxy and CoreDNS.
phase_rows() {
  awk '
    / creating node .*controlplane/ && !cp {cp = 1; print $1, "control plane node launched (image mounted, machined starting)"}
    /^[0-9]+ +[^ ].*: OK/ {
      line = $0; sub(/^[0-9]+ +/, "", line); sub(/^waiting for /, "", line); sub(/: OK.*/, "", line)
      if (!(line in seen)) {seen[line] = 1; print $1, line}
    }' "$1"
}
if [ -f "$out/create-1-1.log" ]; then
  echo "where the 1+1 create's time goes (last run; each phase ends at the stamp of its wait):" >&2
  while read -r ms what; do
    row "1+1 create phase done: $what" "$ms" ms "-"
  done < <(phase_rows "$out/create-1-1.log")
fi

# Memory on the 1+1 cluster: the control plane's and the worker's cgroup, each service's RSS (the
# largest of the nodes').
cp_kb=$(awk '$1 == "controlplane" {print $2; exit}' "$out/mem-1-1")
w_kb=$(awk '$1 == "worker" {print $2; exit}' "$out/mem-1-1")
row "control-plane node memory, idle (RSS in its cgroup)" "$(mb "$cp_kb")" MiB "under 400"
row "worker node memory, idle (RSS in its cgroup)" "$(mb "$w_kb")" MiB "under 100"
for svc in machined apid trustd etcd containerd kubelet; do
  kb=$(awk -v s="$svc" '$1 == s && $2 > m {m = $2} END {print m + 0}' "$out/svc-1-1")
  case $svc in
    machined) goal="under 60" ;;
    apid | trustd) goal="under 30" ;;
    *) goal="-" ;;
  esac
  row "$svc RSS on a Kubernetes node (largest of the nodes)" "$(mb "$kb")" MB "$goal"
done

if [ -z "${SKIP_APID:-}" ]; then
  echo "bench: the apid hop (3000 calls each way)" >&2
  go test -count=1 -run '^$' -bench VersionRealMachined -benchtime 3000x ./internal/apid/e2e/ >"$out/apid.txt" 2>&1 ||
    { cat "$out/apid.txt" >&2; exit 1; }
  apid=$(grep -o '[0-9.]* apid/direct' "$out/apid.txt" | awk '{print $1}')
  relay=$(grep -o '[0-9.]* relay/direct' "$out/apid.txt" | awk '{print $1}')
  row "apid hop: Version via apid / direct socket" "$apid" x "within 0.10 of the relay ($relay)"
  row "bare byte relay / direct socket" "$relay" x "-"
fi

if [ -z "${SKIP_METAL:-}" ]; then
  echo "bench: metal boot under QEMU (3 boots)" >&2
  CI= go test -count=1 -run '^$' -bench BootToAPI -benchtime 3x -timeout 30m ./internal/e2e/metal/ >"$out/boot.txt" 2>&1 ||
    { cat "$out/boot.txt" >&2; exit 1; }
  wall=$(grep -o '[0-9.]* s-wall-to-apid' "$out/boot.txt" | awk '{print $1}')
  kernel=$(grep -o '[0-9.]* s-to-apid' "$out/boot.txt" | awk '{print $1}')
  row "metal boot, QEMU start to apid answering (TCG, mean of 3)" "$wall" s "under 4"
  row "metal boot, kernel start to apid serving (console timestamps)" "$kernel" s "-"
fi

file=_out/bench/$(date -u +%Y%m%dT%H%M%SZ).json
{
  printf '{"date": "%s", "commit": "%s", "cpus": %s, "figures": [\n' "$(date -u +%FT%TZ)" "$(git rev-parse --short HEAD)" "$(nproc)"
  for i in "${!json[@]}"; do
    sep=,
    [ "$i" = $((${#json[@]} - 1)) ] && sep=
    printf '  %s%s\n' "${json[$i]}" "$sep"
  done
  printf ']}\n'
} >"$file"
echo "bench: written to $file" >&2
