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

go build -trimpath -ldflags "-X $PKG/internal/version.Tag=$VERSION" -o "$OUT/machined-$VERSION" ./cmd/machined
go build -trimpath -o "$OUT/etcd" ./cmd/etcd
"$OUT/imager" build --key "$IMAGE_KEY" --version "$VERSION" \
	--machined "$OUT/machined-$VERSION" --etcd "$OUT/etcd" --out "$OUT/talos-$VERSION.img"
