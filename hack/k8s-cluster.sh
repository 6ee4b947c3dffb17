#!/usr/bin/env bash
# The main job: a local Kubernetes cluster on the container provisioner (root). Builds talosctl
# and machined, builds the node image when it is missing or carries no Kubernetes, creates the
# cluster (1 control plane + 1 worker unless the arguments say otherwise; they go to `talosctl
# cluster create`) and writes the admin kubeconfig to _out/kubeconfig.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"

[ "$(id -u)" = 0 ] || {
  echo "needs root (namespaces, a bridge, loop mounts, cgroups): run it with sudo; the rootless process mode (README) runs no Kubernetes" >&2
  exit 1
}

NAME=${NAME:-k8s}

echo "building talosctl and machined"
go build -o _out/ ./cmd/talosctl ./cmd/machined

if [ ! -f _out/rootfs.sqsh ] || ! command -v unsquashfs >/dev/null ||
  ! unsquashfs -l _out/rootfs.sqsh 2>/dev/null | grep -q 'usr/share/talos/images/kubernetes.tar$'; then
  echo "building the node image with Kubernetes (make rootfs: about 9 minutes cold, cached after)"
  make rootfs
fi

_out/talosctl cluster create --provisioner container --name "$NAME" --image "$PWD/_out/rootfs.sqsh" \
  --controlplanes 1 --workers 1 "$@"
_out/talosctl --context "$NAME" kubeconfig --merge=false --force _out/kubeconfig
echo "kubeconfig: _out/kubeconfig (kubectl --kubeconfig _out/kubeconfig get nodes)"
