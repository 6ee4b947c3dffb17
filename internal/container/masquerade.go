package container

import (
	"fmt"
	"net/netip"
	"os"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
)

// masqueradeTable is the nftables table of a cluster's NAT, named after its bridge.
func masqueradeTable(bridge string) *nftables.Table {
	return &nftables.Table{Family: nftables.TableFamilyIPv4, Name: "talos-" + bridge}
}

// Masquerade lets a cluster's nodes reach beyond the host, as upstream's networks do: packets
// from the cluster network to any address outside it, and outside the except networks
// (--no-masquerade-cidrs), leave with the host's address; the host forwards (ip_forward). The
// rules are a table of the cluster's own (talos-<bridge>), removed by RemoveMasquerade.
func Masquerade(bridge string, cidr netip.Prefix, except []netip.Prefix) error {
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644); err != nil {
		return fmt.Errorf("turning on IPv4 forwarding: %w", err)
	}

	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}

	table := c.AddTable(masqueradeTable(bridge))
	policy := nftables.ChainPolicyAccept
	chain := c.AddChain(&nftables.Chain{
		Name: "postrouting", Table: table, Type: nftables.ChainTypeNAT, Hooknum: nftables.ChainHookPostrouting,
		Priority: nftables.ChainPriorityNATSource, Policy: &policy,
	})

	cidr = cidr.Masked()
	exprs := []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4}, // source
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask4(cidr.Bits()), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: cidr.Addr().AsSlice()},
	}

	for _, p := range append([]netip.Prefix{cidr}, except...) {
		if !p.Addr().Is4() {
			continue
		}

		p = p.Masked()
		exprs = append(exprs,
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4}, // destination
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask4(p.Bits()), Xor: make([]byte, 4)},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: p.Addr().AsSlice()})
	}

	c.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: append(exprs, &expr.Masq{})})

	if err = c.Flush(); err != nil {
		return fmt.Errorf("adding the cluster's NAT (nftables table %s): %w", table.Name, err)
	}

	return nil
}

// RemoveMasquerade removes the cluster's NAT table, if it is there.
func RemoveMasquerade(bridge string) error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}

	tables, err := c.ListTablesOfFamily(nftables.TableFamilyIPv4)
	if err != nil {
		return fmt.Errorf("listing nftables tables: %w", err)
	}

	t := masqueradeTable(bridge)
	if !slices.ContainsFunc(tables, func(x *nftables.Table) bool { return x.Name == t.Name }) {
		return nil
	}

	c.DelTable(t)

	if err = c.Flush(); err != nil {
		return fmt.Errorf("removing the cluster's NAT (nftables table %s): %w", t.Name, err)
	}

	return nil
}

// mask4 is an IPv4 netmask of bits ones.
func mask4(bits int) []byte {

	v := ^uint32(0) << (32 - bits)
	if bits == 0 {
		v = 0
	}

	return []byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}
}
