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
# Nodes booting the signed UKI build the UKI of the new kernel and initramfs with the signature
# of its PCR 11 values the image carries.
PCR_KEY=${PCR_KEY:-$OUT/pcr-signing-key.pem}
pcr=""
if [ -f "$PCR_KEY" ]; then
	pcr="--pcr-key $PCR_KEY"
fi
# shellcheck disable=SC2086 # $pcr is one flag and its value, or nothing
"$OUT/imager" build --key "$IMAGE_KEY" --version "$VERSION" --gzip=false $pcr \
	--vmlinuz "$OUT/boot/vmlinuz" --initramfs "$OUT/boot/initramfs.img" --out "$OUT/talos-metal-$VERSION.img"
