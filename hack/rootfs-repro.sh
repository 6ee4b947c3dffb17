#!/bin/sh
# Checks that the node rootfs is reproducible: builds it (as `make rootfs`), then again into a
# fresh folder with an empty tool cache and, unless FRESH_GOCACHE=0, an empty Go build cache
# (everything compiled again), and compares the two squashfs files byte for byte.
set -eu

OUT=${OUT:-_out}
FRESH_GOCACHE=${FRESH_GOCACHE:-1}

OUT="$OUT" ./hack/rootfs.sh
first=$(sha256sum "$OUT/rootfs.sqsh" | cut -d' ' -f1)

second_out=$(mktemp -d "${TMPDIR:-/tmp}/rootfs-repro.XXXXXX")
trap 'rm -rf "$second_out"' EXIT
if [ "$FRESH_GOCACHE" = 1 ]; then
	export GOCACHE="$second_out/gocache"
fi

OUT="$second_out" ./hack/rootfs.sh
second=$(sha256sum "$second_out/rootfs.sqsh" | cut -d' ' -f1)

echo "first build:  $first"
echo "second build: $second (fresh tool cache, fresh Go build cache: $FRESH_GOCACHE)"
if [ "$first" != "$second" ]; then
	echo "rootfs is NOT reproducible: compare with unsquashfs -lls" >&2
	exit 1
fi
echo "rootfs is reproducible"
