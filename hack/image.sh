#!/bin/sh
# Builds a signed node image: _out/talos-$VERSION.img holding machined (with Tag=$VERSION) and
# etcd. The signing key is $IMAGE_KEY (default _out/image-signing.key); it is created, mode
# 0600, if missing. Give nodes the public key (same path, .pub) as STATE/image-signing.pub.
# ROOTFS=1 also builds the node rootfs with this machined (static) and carries it in the image as
# rootfs.sqsh, for container-mode nodes.
set -eu

VERSION=${VERSION:?set VERSION, e.g. VERSION=v1.11.1}
OUT=${OUT:-_out}
IMAGE_KEY=${IMAGE_KEY:-$OUT/image-signing.key}
PKG=github.com/talos-go/talos

mkdir -p "$OUT"
go build -o "$OUT/imager" ./cmd/imager

if [ ! -f "$IMAGE_KEY" ]; then
	"$OUT/imager" keygen --out "$(dirname "$IMAGE_KEY")"
fi

# The node trusts the key that signed its image (plus BOOT/image-signing.pub): the next upgrade
# must be signed by it too.
TRUSTED=$("$OUT/imager" pubkey "${IMAGE_KEY%.key}.pub")
LDFLAGS="-X $PKG/internal/version.Tag=$VERSION -X $PKG/internal/imager.TrustedKeys=$TRUSTED"
if [ -n "${ROOTFS:-}" ]; then
	# The rootfs runs machined and etcd with no host libraries: build them static.
	CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags "-s -w -buildid= $LDFLAGS" -o "$OUT/machined-$VERSION" ./cmd/machined
	CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags "-s -w -buildid=" -o "$OUT/etcd" ./cmd/etcd
	VERSION=$VERSION OUT=$OUT MACHINED=$OUT/machined-$VERSION ETCD=$OUT/etcd ROOTFS_OUT=$OUT/rootfs-$VERSION.sqsh ./hack/rootfs.sh
	set -- --rootfs "$OUT/rootfs-$VERSION.sqsh"
else
	go build -trimpath -ldflags "$LDFLAGS" -o "$OUT/machined-$VERSION" ./cmd/machined
	go build -trimpath -o "$OUT/etcd" ./cmd/etcd
	set --
fi
"$OUT/imager" build --key "$IMAGE_KEY" --version "$VERSION" \
	--machined "$OUT/machined-$VERSION" --etcd "$OUT/etcd" "$@" --out "$OUT/talos-$VERSION.img"
