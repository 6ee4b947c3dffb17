#!/bin/sh
# Builds the metal boot assets in _out/boot: vmlinuz, Debian's cloud kernel, and initramfs.img
# with machined as /init, the node image (_out/rootfs.sqsh, built first when missing) and the
# boot's kernel modules (internal/imager/boot.go). The kernel package is downloaded with apt and
# extracted under _out/cache/kernel; the host's own /boot is not touched.
set -eu

OUT=${OUT:-_out}
KERNEL_PACKAGE=${KERNEL_PACKAGE:-linux-image-cloud-amd64}

if [ ! -f "$OUT/rootfs.sqsh" ] || [ ! -f "$OUT/cache/node/machined" ]; then
	echo "[1/3] the node image is missing: building it (make rootfs)"
	OUT=$OUT ./hack/rootfs.sh
else
	echo "[1/3] node image $OUT/rootfs.sqsh"
fi

# GRUB's BIOS and UEFI images and grub-mkimage, for the disk an installed node boots from;
# xorriso and mtools for grub-mkrescue's ISO; systemd's EFI stub for the UKI; qemu-utils'
# qemu-img for the OpenStack (qcow2) and Azure (VHD) disk images.
pkgs="grub-pc-bin grub-efi-amd64-bin xorriso mtools systemd-boot-efi qemu-utils"
# shellcheck disable=SC2086 # a list of package names
if ! dpkg -s $pkgs >/dev/null 2>&1; then
	if [ "$(id -u)" != 0 ]; then
		echo "boot: one of Debian's $pkgs is missing: run apt-get install $pkgs as root" >&2
		exit 1
	fi
	apt-get update -qq
	# shellcheck disable=SC2086
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $pkgs >/dev/null
fi

# The meta package names the kernel's versioned package; both come from Debian's archive.
pkg=$(apt-cache depends "$KERNEL_PACKAGE" 2>/dev/null | sed -n 's/^ *Depends: \(linux-image-[0-9].*\)$/\1/p' | head -n1)
if [ -z "$pkg" ]; then
	if [ "$(id -u)" != 0 ]; then
		echo "boot: apt knows no $KERNEL_PACKAGE: run apt-get update as root" >&2
		exit 1
	fi
	apt-get update -qq
	pkg=$(apt-cache depends "$KERNEL_PACKAGE" | sed -n 's/^ *Depends: \(linux-image-[0-9].*\)$/\1/p' | head -n1)
fi
ver=$(apt-cache policy "$pkg" | sed -n 's/^ *Candidate: //p')
kdir=$OUT/cache/kernel/$pkg-$ver
if [ ! -d "$kdir/boot" ]; then
	echo "[2/3] downloading $pkg $ver from Debian"
	tmp=$(mktemp -d)
	chmod 777 "$tmp" # apt's _apt user writes the download
	(cd "$tmp" && apt-get download -qq "$pkg=$ver")
	mkdir -p "$kdir.tmp"
	dpkg-deb -x "$tmp"/*.deb "$kdir.tmp"
	# The package leaves the module index to depmod, run on install.
	for m in "$kdir.tmp"/lib/modules/*; do
		depmod -b "$kdir.tmp" "$(basename "$m")"
	done
	rm -rf "$tmp" "$kdir"
	mv "$kdir.tmp" "$kdir"
else
	echo "[2/3] kernel $pkg $ver (cached)"
fi

echo "[3/3] initramfs"
go build -o "$OUT/imager" ./cmd/imager
# An installed node trusts the image signing key's public half for its upgrades (make
# metal-image signs with the private half); the key is made, mode 0600, when missing.
IMAGE_KEY=${IMAGE_KEY:-$OUT/image-signing.key}
if [ ! -f "$IMAGE_KEY" ]; then
	"$OUT/imager" keygen --out "$(dirname "$IMAGE_KEY")"
fi
# The UKI's PCR 11 values are signed with the PCR signing key (a node booted from it seals its
# TPM disk keys to them); made, mode 0600, when missing. `talosctl gen secureboot pcr`'s
# pcr-signing-key.pem works as well.
PCR_KEY=${PCR_KEY:-$OUT/pcr-signing-key.pem}
if [ ! -f "$PCR_KEY" ]; then
	"$OUT/imager" pcr-keygen --out "$PCR_KEY"
fi
# BOOT_PLATFORMS (nocloud, openstack, aws, gcp, azure, comma-separated, or all) adds those
# platforms' disk images beside metal's; none by default, each costs a disk image's build.
# BOOT_COMPRESS=1 also writes each disk image compressed as upstream ships them (<name>.zst,
# about 5 s an image); the uncompressed ones stay, for QEMU.
compress=
if [ "${BOOT_COMPRESS:-0}" = 1 ]; then
	compress=--compress
fi
# shellcheck disable=SC2086 # $compress is one flag or none
"$OUT/imager" boot --kernel "$kdir" --rootfs "$OUT/rootfs.sqsh" \
	--keys "${IMAGE_KEY%.key}.pub" --pcr-key "$PCR_KEY" --platform "${BOOT_PLATFORMS:-}" $compress --out "$OUT/boot"
