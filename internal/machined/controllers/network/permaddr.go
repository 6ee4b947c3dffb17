package network

import (
	"net"
	"runtime"
	"slices"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ethtoolGPermAddr is ETHTOOL_GPERMADDR of linux/ethtool.h.
const ethtoolGPermAddr = 0x20

// ethtoolPermAddr is struct ethtool_perm_addr with room for any hardware address.
type ethtoolPermAddr struct {
	cmd, size uint32
	data      [32]byte
}

// ifreqData is struct ifreq with its union holding a pointer (ifr_data), 40 bytes on 64-bit.
type ifreqData struct {
	name [unix.IFNAMSIZ]byte
	data uintptr
	_    [16]byte
}

// permanentAddr is a link's permanent hardware address, as ethtool reads it: the one the device
// was made with, which a bond or a configured MAC hides from the link's own address. It is nil
// for links that have none (virtual links answer zeros or nothing).
func permanentAddr(link string) net.HardwareAddr {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	defer unix.Close(fd)

	req := &ethtoolPermAddr{cmd: ethtoolGPermAddr, size: 32}
	ifr := &ifreqData{data: uintptr(unsafe.Pointer(req))}
	copy(ifr.name[:unix.IFNAMSIZ-1], link)

	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(ifr)))
	runtime.KeepAlive(req)

	if errno != 0 || req.size == 0 || req.size > uint32(len(req.data)) {
		return nil
	}

	addr := req.data[:req.size]
	if !slices.ContainsFunc(addr, func(b byte) bool { return b != 0 }) {
		return nil
	}

	return net.HardwareAddr(slices.Clone(addr))
}
