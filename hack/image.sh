#!/bin/sh
# Builds a signed node image: _out/talos-$VERSION.img holding machined (with Tag=$VERSION) and
# etcd. The signing key is $IMAGE_KEY (default _out/image-signing.key); it is created, mode
# 0600, if missing. Give nodes the public key (same path, .pub) as STATE/image-signing.pub.
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
go build -trimpath -ldflags "-X $PKG/internal/version.Tag=$VERSION -X $PKG/internal/imager.TrustedKeys=$TRUSTED" \
	-o "$OUT/machined-$VERSION" ./cmd/machined
go build -trimpath -o "$OUT/etcd" ./cmd/etcd
"$OUT/imager" build --key "$IMAGE_KEY" --version "$VERSION" \
	--machined "$OUT/machined-$VERSION" --etcd "$OUT/etcd" --out "$OUT/talos-$VERSION.img"
