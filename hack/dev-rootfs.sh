#!/usr/bin/env bash
# Builds a minimal node image for the container provisioner while `make rootfs` (the full image:
# containerd, runc, CNI, iptables) is not there: machined as /sbin/init, etcd in /usr/bin, the
# /etc files a node binds its own over, and the mount points of the node's root.
# Usage: hack/dev-rootfs.sh [OUT]   (default _out/rootfs-dev.sqsh). Needs mksquashfs
# (Debian: squashfs-tools). NODE_BIN_DIR=DIR takes machined and etcd from DIR instead of building
# them (they must be static: CGO_ENABLED=0).
set -euo pipefail
cd "$(dirname "$0")/.."

out=${1:-_out/rootfs-dev.sqsh}
command -v mksquashfs >/dev/null || { echo "mksquashfs not found: apt-get install squashfs-tools" >&2; exit 1; }

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

mkdir -p "$stage"/{sbin,usr/bin,etc,dev,proc,sys,run,tmp,system,var,root,opt/cni/bin}
if [ -n "${NODE_BIN_DIR:-}" ]; then
  cp "$NODE_BIN_DIR/machined" "$stage/sbin/init"
  cp "$NODE_BIN_DIR/etcd" "$stage/usr/bin/etcd"
else
  # Static binaries: the image has no C library.
  CGO_ENABLED=0 go build -trimpath -ldflags=-s -o "$stage/sbin/init" ./cmd/machined
  CGO_ENABLED=0 go build -trimpath -ldflags=-s -o "$stage/usr/bin/etcd" ./cmd/etcd
fi

: > "$stage/etc/hosts"
: > "$stage/etc/resolv.conf"
: > "$stage/etc/hostname"
printf 'root:x:0:0:root:/root:/sbin/nologin\n' > "$stage/etc/passwd"
printf 'root:x:0:\n' > "$stage/etc/group"
printf 'NAME="Talos"\nID=talos\nPRETTY_NAME="Talos (talos-go, development image)"\n' > "$stage/etc/os-release"

mkdir -p "$(dirname "$out")"
# Fixed times and owners: the same inputs give the same bytes.
mksquashfs "$stage" "$out.tmp" -noappend -all-root -quiet -no-progress -mkfs-time 0 -all-time 0 >/dev/null
mv "$out.tmp" "$out"
echo "$out: $(du -h "$out" | cut -f1)"
