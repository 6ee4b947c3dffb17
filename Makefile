# Build targets. `make image VERSION=v1.11.1` builds a signed node image in _out/;
# `make rootfs` builds the node rootfs, _out/rootfs.sqsh, with the Kubernetes images
# (`make rootfs KUBERNETES=0`: without them, for a quick development image).
OUT ?= _out
KUBERNETES ?= 1

.PHONY: image imager rootfs rootfs-repro boot metal-image
image:
	VERSION=$(VERSION) OUT=$(OUT) ROOTFS=$(ROOTFS) ./hack/image.sh

imager:
	go build -o $(OUT)/imager ./cmd/imager

rootfs:
	VERSION=$(VERSION) OUT=$(OUT) KUBERNETES=$(KUBERNETES) ./hack/rootfs.sh

# Builds the rootfs twice from nothing cached (tools, Go build cache) and compares the bytes.
rootfs-repro:
	OUT=$(OUT) ./hack/rootfs-repro.sh

# The metal boot assets, _out/boot/vmlinuz and _out/boot/initramfs.img (Debian's cloud kernel;
# machined as /init with the node image): boots under QEMU (see internal/e2e/metal).
# BOOT_PLATFORMS=all adds every platform's disk image; BOOT_COMPRESS=1 also writes them
# compressed as upstream ships them (<name>.zst; see docs/platforms.md).
boot:
	OUT=$(OUT) ./hack/boot.sh

# A metal node's upgrade image, _out/talos-metal-$(VERSION).img: the boot assets (make boot),
# signed with the key their nodes trust. Serve it over HTTP and run
# `talosctl upgrade --image http://HOST/talos-metal-$(VERSION).img`.
metal-image:
	VERSION=$(VERSION) OUT=$(OUT) ./hack/metal-image.sh
