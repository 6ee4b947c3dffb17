package provision

import (
	"fmt"
	"net/netip"

	"github.com/talos-go/talos/internal/provision/qemu/vm"
)

// ProvisionerQEMU runs each node as a QEMU guest booting the metal boot assets (`make boot`).
const ProvisionerQEMU = "qemu"

// QEMUInstallDisk is the guests' disk (virtio), the generated configs' install disk.
const QEMUInstallDisk = "/dev/vda"

// QEMURequest is what only the qemu provisioner uses (upstream's qemu flags). CPUs, memory and
// MTU are the container provisioner's flags (ContainerRequest), as upstream shares them.
type QEMURequest struct {
	Kernel string // vmlinuz of `make boot`
	Initrd string // its initramfs
	ISO    string // boot this ISO (make boot's metal-amd64.iso) instead, until installed
	USB    string // or this USB stick's image (the hybrid ISO is one)
	UKI    string // or this unified kernel image (make boot's metal-amd64-uki.efi), with UEFI
	// DiskImage, or this disk image (make boot's metal-amd64.raw) as each node's disk: the node
	// boots it into maintenance mode, installed already.
	DiskImage string
	// IPXEBootScript, or this iPXE script's URL: the nodes boot from the network (their cards'
	// iPXE), the cluster's DHCP giving them the URL.
	IPXEBootScript string
	// NoBootloader boots the kernel and initramfs directly on every start, also once installed.
	NoBootloader bool
	// NoUEFI boots the nodes with the BIOS (SeaBIOS) instead of UEFI (OVMF).
	NoUEFI bool
	// UEFISearchPaths are searched for OVMF before the distributions' folders.
	UEFISearchPaths []string
	DiskMB          int64 // each node's disk, a file in its state folder
	// DiskBlockSize is that disk's block size (--disk-block-size): 512, or 4096 (a 4Kn disk,
	// which boots with UEFI only).
	DiskBlockSize   int
	ExtraKernelArgs []string

	Preallocate       bool     // allocate the disk files' blocks (else sparse)
	ExtraDisks        int      // more disks of each worker
	ExtraDisksSizeMB  int64    // their size
	ExtraDisksDrivers []string // their drivers, one per disk (virtio when not given)
	// UserVolumes are --user-volumes: a disk of every node per entry, with a UserVolumeConfig
	// for each of its volumes.
	UserVolumes         [][]UserVolume
	BadRTC              bool // the guests' clocks start two years behind
	DisableDHCPHostname bool // the leases name no hostname
	// ApplyConfig boots the nodes without a config (maintenance mode) and applies each one's
	// through the maintenance API, instead of talos.config=.
	ApplyConfig bool
	// ConfigInjection is how a booting node gets its config (--config-injection-method): "" or
	// "http", served by the network process (talos.config=URL); "metal-iso", on an ISO of its
	// own labelled metal-iso (talos.config=metal-iso).
	ConfigInjection string
	// UUIDHostnames names each node machine-<its SMBIOS UUID> (upstream's --with-uuid-hostnames).
	UUIDHostnames bool
	// TPM gives each node a TPM emulated by swtpm: vm.TPM2 or vm.TPM12 ("" for none).
	TPM string
	// IOMMU gives each node an Intel IOMMU (the q35 machine).
	IOMMU bool
	// UseVIP makes the Kubernetes endpoint a virtual IP (the network's 50th address) that the
	// control planes elect a holder of (machine.network.interfaces[].vip), as upstream's --use-vip.
	UseVIP bool
	// JSONLogs has the nodes send their logs (machine.logging, json_lines over TCP) to the
	// network process, which writes them to json-logs.log in the cluster's folder.
	JSONLogs bool
}

// The TPM versions of --with-tpm2 and --with-tpm1_2.
const (
	TPM2  = vm.TPM2
	TPM12 = vm.TPM12
)

// KMSKeyFile is the cluster's KMS sealing key, in its folder: without it the nodes' KMS-sealed
// volumes do not open.
const KMSKeyFile = "kms.key"

// vipAddress is --use-vip's shared address: the cluster network's 50th, as upstream's.
func vipAddress(cidr netip.Prefix) netip.Addr {
	a := cidr.Masked().Addr()
	for range 50 {
		a = a.Next()
	}

	return a
}

// vipPatch is the control planes' config patch that shares the VIP on their network card.
func vipPatch(vip netip.Addr) string {
	return fmt.Sprintf(`{"machine": {"network": {"interfaces": [{"interface": "eth0", "dhcp": true, "vip": {"ip": %q}}]}}}`, vip)
}

// JSONLogsFile is where --with-json-logs' logs go, in the cluster's folder.
const JSONLogsFile = "json-logs.log"

// The values of --config-injection-method.
const (
	ConfigInjectionHTTP = "http"
	ConfigInjectionISO  = "metal-iso"
)

// CIDR6 is the cluster's IPv6 network with --ipv6, as upstream derives it from the IPv4 one: the
// ULA prefix fd74:616c ("tal"), then the IPv4 network's four bytes, a /64.
func CIDR6(cidr4 netip.Prefix) netip.Prefix {
	b := cidr4.Masked().Addr().As4()
	a := [16]byte{0xfd, 0x74, 0x61, 0x6c, b[0], b[1], b[2], b[3]}

	return netip.PrefixFrom(netip.AddrFrom16(a), 64)
}
