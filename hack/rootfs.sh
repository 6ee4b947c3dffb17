#!/bin/sh
# Builds the node rootfs, _out/rootfs.sqsh: machined as /sbin/init, etcd, containerd, runc, the
# CNI plugins and Debian's iptables/nftables with their libraries (see internal/imager), and the
# image cache with Kubernetes v1.34.0, CoreDNS, flannel, pause and etcd (internal/images).
# Pinned tool builds are cached in _out/cache; an unchanged tree keeps the last squashfs. The
# first Kubernetes build takes several minutes (about 20 on 2 busy cores); KUBERNETES=0 leaves
# the Kubernetes images out for a quick development image.
# VERSION (optional) is built into machined and /etc/os-release. MACHINED and ETCD (optional)
# are static binaries to use instead of building them here; ROOTFS_OUT the squashfs to write.
set -eu

OUT=${OUT:-_out}
VERSION=${VERSION:-}
MACHINED=${MACHINED:-}
ETCD=${ETCD:-}
ROOTFS_OUT=${ROOTFS_OUT:-$OUT/rootfs.sqsh}
KUBERNETES=${KUBERNETES:-1}
PKG=github.com/talos-go/talos

# Debian packages the build uses: mksquashfs, the staged userland and its files, and a static
# libseccomp for runc; mount and coreutils give the Kubernetes images mount(8) and cp; xfsprogs
# and dosfstools give metal nodes mkfs.xfs and mkfs.fat, cryptsetup-bin their LUKS2 volumes.
need=""
for pkg in squashfs-tools iptables nftables ca-certificates netbase libseccomp-dev gcc libc6-dev mount coreutils xfsprogs dosfstools cryptsetup-bin; do
	dpkg -s "$pkg" >/dev/null 2>&1 || need="$need $pkg"
done
if [ -n "$need" ]; then
	if [ "$(id -u)" != 0 ]; then
		echo "rootfs: missing Debian packages:$need (run as root, or apt-get install them)" >&2
		exit 1
	fi
	echo "installing Debian packages:$need"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need >/dev/null
fi

mkdir -p "$OUT/cache/node"
go build -o "$OUT/imager" ./cmd/imager

LDFLAGS="-s -w -buildid="
VERSION_FLAG=""
if [ -n "$VERSION" ]; then
	LDFLAGS="$LDFLAGS -X $PKG/internal/version.Tag=$VERSION"
	VERSION_FLAG="--version $VERSION"
fi

# Static, stripped, no VCS stamp: same sources, same bytes.
if [ -z "$MACHINED" ]; then
	echo "building machined (static)"
	MACHINED=$OUT/cache/node/machined
	CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags "$LDFLAGS" -o "$MACHINED" ./cmd/machined
fi
if [ -z "$ETCD" ]; then
	echo "building etcd (static)"
	ETCD=$OUT/cache/node/etcd
	CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags "-s -w -buildid=" -o "$ETCD" ./cmd/etcd
fi

# apid and trustd alone: their processes then load none of machined's packages.
echo "building apid and trustd (static)"
CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags "$LDFLAGS" -o "$OUT/cache/node/" ./cmd/apid ./cmd/trustd

# shellcheck disable=SC2086 # VERSION_FLAG is a flag and its value, or nothing
"$OUT/imager" rootfs $VERSION_FLAG --machined "$MACHINED" --etcd "$ETCD" \
	--apid "$OUT/cache/node/apid" --trustd "$OUT/cache/node/trustd" \
	--cache "$OUT/cache" --out "$ROOTFS_OUT" ${IMAGES:+--images "$IMAGES"} \
	--kubernetes="$([ "$KUBERNETES" = 0 ] && echo false || echo true)" --repo .
