# Build targets. `make image VERSION=v1.11.1` builds a signed node image in _out/;
# `make rootfs` builds the node rootfs, _out/rootfs.sqsh, with the Kubernetes images
# (`make rootfs KUBERNETES=0`: without them, for a quick development image).
OUT ?= _out
KUBERNETES ?= 1

.PHONY: image imager rootfs rootfs-repro
image:
	VERSION=$(VERSION) OUT=$(OUT) ROOTFS=$(ROOTFS) ./hack/image.sh

imager:
	go build -o $(OUT)/imager ./cmd/imager

rootfs:
	VERSION=$(VERSION) OUT=$(OUT) KUBERNETES=$(KUBERNETES) ./hack/rootfs.sh

# Builds the rootfs twice from nothing cached (tools, Go build cache) and compares the bytes.
rootfs-repro:
	OUT=$(OUT) ./hack/rootfs-repro.sh
