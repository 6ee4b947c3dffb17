// Package eui64 makes the IPv6 address of a /64 prefix and a MAC address with the modified EUI-64
// interface identifier (RFC 4291), as a kernel's SLAAC does and KubeSpan's addresses are built.
package eui64

import (
	"net"
	"net/netip"
)

// Address is prefix's network with mac's modified EUI-64 as the interface identifier; the
// network's own address when mac is not 48 bits.
func Address(prefix netip.Prefix, mac net.HardwareAddr) netip.Addr {
	b := prefix.Masked().Addr().As16()
	if len(mac) == 6 {
		b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15] = mac[0]^0x02, mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]
	}

	return netip.AddrFrom16(b)
}
