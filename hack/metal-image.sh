#!/bin/sh
# Builds a metal node's upgrade image, $OUT/talos-metal-$VERSION.img: the kernel and initramfs
# of `make boot` (built first when missing), signed with $IMAGE_KEY (default
# $OUT/image-signing.key, the key whose public half the initramfs gives installed nodes).
# Not compressed: the node image in the initramfs is compressed already.
set -eu

VERSION=${VERSION:?set VERSION, e.g. VERSION=v1.11.1}
OUT=${OUT:-_out}
IMAGE_KEY=${IMAGE_KEY:-$OUT/image-signing.key}

if [ ! -f "$OUT/boot/vmlinuz" ] || [ ! -f "$OUT/boot/initramfs.img" ] || [ ! -f "$IMAGE_KEY" ]; then
	echo "the boot assets or the signing key are missing: building them (make boot)"
	OUT=$OUT IMAGE_KEY=$IMAGE_KEY ./hack/boot.sh
fi

go build -o "$OUT/imager" ./cmd/imager
"$OUT/imager" build --key "$IMAGE_KEY" --version "$VERSION" --gzip=false \
	--vmlinuz "$OUT/boot/vmlinuz" --initramfs "$OUT/boot/initramfs.img" --out "$OUT/talos-metal-$VERSION.img"
