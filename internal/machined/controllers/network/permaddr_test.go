package network

import (
	"net"
	"slices"
	"testing"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/talos-go/talos/internal/container/netnstest"
	"github.com/talos-go/talos/internal/testenv"
)

// Links with no device of their own have no permanent address.
func TestPermanentAddrOfVirtualLinks(t *testing.T) {
	if a := permanentAddr("lo"); a != nil {
		t.Errorf("lo has a permanent address %s", a)
	}

	if a := permanentAddr("no-such-link"); a != nil {
		t.Errorf("a missing link has a permanent address %s", a)
	}
}

// A card's permanent address is the one the kernel reports over rtnetlink (IFLA_PERM_ADDRESS).
// Virtual links (veth, bridge, macvlan, tap) have none, so the cards are looked for in the
// network namespace the tests were started in; they are only read.
func TestPermanentAddrOfCards(t *testing.T) {
	var want, got map[string]net.HardwareAddr

	check := func() error {
		var err error

		if want, err = kernelPermAddrs(); err != nil {
			return err
		}

		got = map[string]net.HardwareAddr{}
		for link := range want {
			got[link] = permanentAddr(link)
		}

		return nil
	}

	var err error
	if ns := netnstest.Outer(); ns != "" {
		err = netnstest.In(ns, check)
	} else {
		err = check()
	}

	if err != nil {
		t.Fatal(err)
	}

	if len(want) == 0 {
		if testenv.InCI() {
			t.Fatal("no link of this machine has a permanent address: CI's machine has a card with one")
		}

		t.Skip("no link of this machine has a permanent address (no card, only virtual links)")
	}

	for link, addr := range want {
		if got[link].String() != addr.String() {
			t.Errorf("%s: permanent address %s, the kernel says %s", link, got[link], addr)
		}
	}

	t.Logf("permanent addresses: %v", got)
}

// kernelPermAddrs lists this namespace's links that have a permanent address, as rtnetlink
// reports it (the attribute is sent only when the address is not all zeros).
func kernelPermAddrs() (map[string]net.HardwareAddr, error) {
	c, err := netlink.Dial(unix.NETLINK_ROUTE, nil)
	if err != nil {
		return nil, err
	}
	defer c.Close()

	msgs, err := c.Execute(netlink.Message{
		Header: netlink.Header{Type: unix.RTM_GETLINK, Flags: netlink.Request | netlink.Dump},
		Data:   make([]byte, unix.SizeofIfInfomsg),
	})
	if err != nil {
		return nil, err
	}

	out := map[string]net.HardwareAddr{}

	for _, m := range msgs {
		ad, err := netlink.NewAttributeDecoder(m.Data[unix.SizeofIfInfomsg:])
		if err != nil {
			return nil, err
		}

		var (
			name string
			perm net.HardwareAddr
		)

		for ad.Next() {
			switch ad.Type() {
			case unix.IFLA_IFNAME:
				name = ad.String()
			case unix.IFLA_PERM_ADDRESS:
				perm = slices.Clone(ad.Bytes())
			}
		}

		if err = ad.Err(); err != nil {
			return nil, err
		}

		if perm != nil {
			out[name] = perm
		}
	}

	return out, nil
}
