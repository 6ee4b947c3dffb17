#!/usr/bin/env bash
# Kubernetes conformance: builds upstream's e2e suite (e2e.test and kubectl, Kubernetes v1.34.0)
# here and runs its [Conformance] tests against a cluster, writing the JUnit report, the log and
# a one-line summary to _out/conformance/.
#
#   hack/conformance.sh [quick|full|build] [KUBECONFIG]
#
# quick (the default) runs the conformance tests that need no image from the internet (listed,
# with how they were chosen, in hack/conformance-quick.txt); full runs all 424, or those whose
# name matches the regular expression FOCUS; build only builds. Without a kubeconfig it creates
# a fresh cluster (root: 1 control plane and WORKERS workers, 1 unless set, on the container
# provisioner, named conformance, on 10.5.90.0/24, its folder in _out/conformance/clusters) and
# destroys it at the end; KEEP=1 keeps it. For full, the cluster has a registry
# (--with-registry) that its nodes mirror every registry through, and hack/e2e-images.sh's
# images (e2e's, built here) are pushed to it first: no test pulls from the internet. Against a
# given kubeconfig, full needs the nodes to reach those images (hack/e2e-images.sh push).
# Conformance wants two schedulable nodes ("should have at least two untainted nodes"):
# WORKERS=2 gives them.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"

MODE=${1:-quick}
KUBECONFIG_FILE=${2:-}
NAME=${NAME:-conformance}
FOCUS=${FOCUS:-}
WORKERS=${WORKERS:-1}
CIDR=${CIDR:-10.5.90.0/24}
KUBE_VERSION=v1.34.0
OUT=$PWD/_out/conformance
CACHE=$PWD/_out/cache/conformance

case $MODE in quick | full | build) ;; *)
  echo "usage: hack/conformance.sh [quick|full|build] [KUBECONFIG]" >&2
  exit 2
  ;;
esac

ldflags() {
  # As internal/imager.KubeVersionLDFlags stamps the node's kube binary: v1.34.0, a fixed date.
  local v=${KUBE_VERSION#v} flags="-s -w -buildid=" pkg kv
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    for kv in "gitVersion=$KUBE_VERSION" "gitMajor=${v%%.*}" "gitMinor=$(echo "$v" | cut -d. -f2)" \
      gitCommit= gitTreeState=clean buildDate=1970-01-01T00:00:00Z; do
      flags="$flags -X $pkg.$kv"
    done
  done
  echo "$flags"
}

# build builds e2e.test and kubectl into $BIN, in a copy of build/kubernetes's module: the node
# image's kube binary's requirements and its 31 staging replaces, so the suite is built from the
# same Kubernetes sources as the cluster. Its go.sum gains the entries of the test-only
# dependencies (ginkgo, gomega, the kubectl libraries), checked against the Go checksum database.
# The binaries are cached under a digest of the module, the Go version and the flags.
build() {
  grep -q "k8s.io/kubernetes $KUBE_VERSION\$" build/kubernetes/go.mod || {
    echo "build/kubernetes/go.mod does not require k8s.io/kubernetes $KUBE_VERSION: update KUBE_VERSION here" >&2
    exit 1
  }
  local flags key
  flags=$(ldflags)
  key=$( (cat build/kubernetes/go.mod build/kubernetes/go.sum; go version; echo "$flags") | sha256sum | cut -c1-16)
  BIN=$CACHE/$key
  if [ -x "$BIN/e2e.test" ] && [ -x "$BIN/kubectl" ]; then
    echo "e2e.test and kubectl $KUBE_VERSION: cached in $BIN"
    return
  fi

  local mod=$CACHE/module start=$SECONDS
  mkdir -p "$mod" "$OUT"
  cp build/kubernetes/go.mod build/kubernetes/go.sum "$mod/"
  sed -i '1s|.*|module conformance|' "$mod/go.mod"
  # As the node image's tools: static, trimmed paths, the caller's GOFLAGS and workspace off.
  # The same compile settings as its kube build let the Go build cache share those packages.
  export GOWORK=off GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=0

  echo "building e2e.test and kubectl $KUBE_VERSION (about 11 minutes on 2 cores after make rootfs, which compiles most of it; log: $OUT/build.log)"
  local pkgs
  pkgs=$(cd "$mod" && go list -deps -test k8s.io/kubernetes/test/e2e k8s.io/kubernetes/cmd/kubectl | grep -v -e ' \[' -e '\.test$')
  echo "  $(echo "$pkgs" | wc -l) packages"
  # Compiles the dependencies first, with a line every 100 packages as progress (go build -v
  # names each package it compiles; cached ones are not named).
  # shellcheck disable=SC2086 # one argument per package
  (cd "$mod" && go build -v -trimpath $pkgs 2>&1) | tee "$OUT/build.log" |
    awk '/^[a-z]/ && !/^#/ { n++; if (n % 100 == 0) { printf "  %d packages compiled\n", n; fflush() } }'
  mkdir -p "$BIN.tmp"
  (cd "$mod" && go test -c -trimpath -ldflags "$flags" -o "$BIN.tmp/e2e.test" k8s.io/kubernetes/test/e2e &&
    go build -trimpath -ldflags "$flags" -o "$BIN.tmp/kubectl" k8s.io/kubernetes/cmd/kubectl) 2>&1 | tee -a "$OUT/build.log"
  rm -rf "$BIN" && mv "$BIN.tmp" "$BIN"
  echo "built in $((SECONDS - start))s: $BIN"
}

# cluster creates the cluster (as hack/k8s-cluster.sh, under its own name and network so that
# it runs beside others) and sets KUBECONFIG_FILE.
cluster() {
  [ "$(id -u)" = 0 ] || {
    echo "creating a cluster needs root (run it with sudo), or pass a kubeconfig: hack/conformance.sh $MODE KUBECONFIG" >&2
    exit 1
  }
  echo "building talosctl and machined"
  go build -o _out/ ./cmd/talosctl ./cmd/machined
  if [ ! -f _out/rootfs.sqsh ] || ! command -v unsquashfs >/dev/null ||
    ! unsquashfs -l _out/rootfs.sqsh 2>/dev/null | grep -q 'usr/share/talos/images/kubernetes.tar$'; then
    echo "building the node image with Kubernetes (make rootfs)"
    make rootfs
  fi
  # The cluster's client config goes to its own file: merged into ~/.talos/config, a second
  # run's context would be renamed (conformance-1) and --context would name the first one's.
  tc=$OUT/talosconfig state=$OUT/clusters
  rm -f "$tc"
  local extra=()
  if [ "$MODE" = full ]; then
    extra=(--with-registry)
  fi
  trap 'if [ "${KEEP:-0}" = 1 ]; then echo "kept the cluster: _out/talosctl --talosconfig $tc cluster destroy --state $state --name $NAME"; else _out/talosctl --talosconfig "$tc" cluster destroy --state "$state" --name "$NAME"; fi' EXIT
  echo "creating the cluster $NAME on $CIDR"
  _out/talosctl --talosconfig "$tc" cluster create --state "$state" --provisioner container --name "$NAME" --cidr "$CIDR" --image "$PWD/_out/rootfs.sqsh" \
    --controlplanes 1 --workers "$WORKERS" --skip-kubeconfig "${extra[@]}"
  KUBECONFIG_FILE=$OUT/kubeconfig
  _out/talosctl --talosconfig "$tc" kubeconfig --merge=false --force "$KUBECONFIG_FILE"
  if [ "$MODE" = full ]; then
    # The registry's address as the cluster records it (the network's gateway, port 5000).
    local host
    host=$(awk '/^registry:/ { r = 1 } r && $1 == "host:" { print $2; exit }' "$state/$NAME/cluster.yaml")
    echo "pushing e2e's images to the cluster's registry $host"
    hack/e2e-images.sh push "$state/$NAME" "$host"
  fi
}

mkdir -p "$OUT"
build
[ "$MODE" = build ] && exit 0
if [ -n "$FOCUS" ] && [ "$MODE" != full ]; then
  echo "FOCUS selects among all conformance tests: use it with full" >&2
  exit 2
fi
if [ "$MODE" = full ] && [ -z "$KUBECONFIG_FILE" ]; then
  hack/e2e-images.sh
fi

# The suite talks to the cluster only: its API server, and kubectl (built here) for the kubectl
# tests; nothing is pulled by the suite itself.
args=(--provider=skeleton --kubectl-path="$BIN/kubectl" --report-dir="$OUT"
  --ginkgo.no-color --ginkgo.silence-skips --ginkgo.timeout=6h)
if [ "$MODE" = quick ]; then
  # One alternative per listed name, its regex characters escaped.
  # shellcheck disable=SC2016 # the $ is a regex character to escape, not an expansion
  focus=$(grep -v -e '^#' -e '^$' hack/conformance-quick.txt | sed 's/[][\.*^$()+?{}|]/\\&/g' | paste -sd'|')
  want=$(grep -c -v -e '^#' -e '^$' hack/conformance-quick.txt)
  args+=(--ginkgo.focus="$focus")
elif [ -n "$FOCUS" ]; then
  args+=(--ginkgo.focus="$FOCUS" --ginkgo.label-filter=Conformance)
else
  args+=(--ginkgo.focus='\[Conformance\]')
fi

# A dry run counts the selected tests: the quick list must name existing tests exactly.
selected=$("$BIN/e2e.test" "${args[@]}" --ginkgo.dry-run 2>&1 | sed -n 's/^Ran \([0-9]*\) of .*/\1/p')
if [ "$MODE" = quick ] && [ "$selected" != "$want" ]; then
  echo "hack/conformance-quick.txt names $want tests but selects ${selected:-none}: a name does not match e2e.test's" >&2
  exit 1
fi

if [ -z "$KUBECONFIG_FILE" ]; then
  cluster
fi
args+=(--kubeconfig="$KUBECONFIG_FILE")

rm -f "$OUT"/junit_*.xml "$OUT/summary.txt" "$OUT/failures.txt"
echo "running $selected $MODE conformance tests (a dot per test passed; log: $OUT/e2e.log)"
set +e
"$BIN/e2e.test" "${args[@]}" 2>&1 | tee "$OUT/e2e.log"
rc=${PIPESTATUS[0]}
set -e

# Ginkgo's last lines: "Ran 129 of 7197 Specs in 600.1 seconds" and
# "SUCCESS! -- 129 Passed | 0 Failed | 0 Pending | 7068 Skipped".
ran=$(sed -n 's/^\(Ran [0-9]* of [0-9]* Specs in [0-9.]* seconds\)$/\1/p' "$OUT/e2e.log" | tail -1)
counts=$(sed -n 's/.*-- \([0-9]* Passed | [0-9]* Failed.*\)/\1/p' "$OUT/e2e.log" | tail -1)
grep -E '^\s*\[FAIL\]' "$OUT/e2e.log" | sed 's/^\s*//' | sort -u >"$OUT/failures.txt" || true
echo "$(date -u +%F) Kubernetes $KUBE_VERSION conformance, $MODE: ${counts:-no result (exit $rc)}; ${ran:-}" | tee "$OUT/summary.txt"
if [ -s "$OUT/failures.txt" ]; then
  echo "failed (also in $OUT/failures.txt):"
  cat "$OUT/failures.txt"
fi
echo "JUnit report: $(ls "$OUT"/junit_*.xml 2>/dev/null || echo none)"
exit "$rc"
