# Build targets. `make image VERSION=v1.11.1` builds a signed node image in _out/;
# `make rootfs` builds the node rootfs, _out/rootfs.sqsh.
OUT ?= _out

.PHONY: image imager rootfs rootfs-repro
image:
	VERSION=$(VERSION) OUT=$(OUT) ROOTFS=$(ROOTFS) ./hack/image.sh

imager:
	go build -o $(OUT)/imager ./cmd/imager

rootfs:
	VERSION=$(VERSION) OUT=$(OUT) ./hack/rootfs.sh

# Builds the rootfs twice from nothing cached (tools, Go build cache) and compares the bytes.
rootfs-repro:
	OUT=$(OUT) ./hack/rootfs-repro.sh
