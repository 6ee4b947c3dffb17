package provision

import (
	"encoding/json"
	"net/netip"
	"testing"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// Each node's wg0 has its own address and key; its peers are the other nodes, with their
// public keys and addresses, and endpoints for the control planes, which listen.
func TestWireguardPatches(t *testing.T) {
	nodes := []netip.Addr{netip.MustParseAddr("10.5.0.2"), netip.MustParseAddr("10.5.0.3"), netip.MustParseAddr("10.5.0.4")}

	patches, err := wireguardPatches(netip.MustParsePrefix("172.20.1.0/24"), nodes, 1)
	if err != nil {
		t.Fatal(err)
	}

	type link struct {
		Addresses []string `json:"addresses"`
		Wireguard struct {
			PrivateKey string `json:"privateKey"`
			ListenPort int    `json:"listenPort"`
			Peers      []struct {
				PublicKey  string   `json:"publicKey"`
				Endpoint   string   `json:"endpoint"`
				AllowedIPs []string `json:"allowedIPs"`
			} `json:"peers"`
		} `json:"wireguard"`
	}

	links := make([]link, len(patches))
	pub := map[string]string{} // public key: its node's address

	for i, p := range patches {
		var doc struct {
			Machine struct {
				Network struct {
					Interfaces []link `json:"interfaces"`
				} `json:"network"`
			} `json:"machine"`
		}

		if err = json.Unmarshal([]byte(p), &doc); err != nil || len(doc.Machine.Network.Interfaces) != 1 {
			t.Fatalf("patch %d: %v\n%s", i, err, p)
		}

		links[i] = doc.Machine.Network.Interfaces[0]

		key, err := wgtypes.ParseKey(links[i].Wireguard.PrivateKey)
		if err != nil {
			t.Fatal(err)
		}

		pub[key.PublicKey().String()] = links[i].Addresses[0]
	}

	for i, l := range links {
		want := []string{"172.20.1.2/24", "172.20.1.3/24", "172.20.1.4/24"}[i]
		if l.Addresses[0] != want || (i == 0) != (l.Wireguard.ListenPort == WireguardPort) || len(l.Wireguard.Peers) != 2 {
			t.Errorf("node %d: %+v", i, l)
		}

		for _, p := range l.Wireguard.Peers {
			addr, ok := pub[p.PublicKey]
			if !ok || addr == l.Addresses[0] || len(p.AllowedIPs) != 1 || netip.MustParsePrefix(addr).Addr().String()+"/32" != p.AllowedIPs[0] {
				t.Errorf("node %d: peer %+v is not another node's (%s)", i, p, addr)
			}

			if isCP := addr == "172.20.1.2/24"; isCP != (p.Endpoint == "10.5.0.2:51111") {
				t.Errorf("node %d: peer %s endpoint %q", i, addr, p.Endpoint)
			}
		}
	}

	if _, err = wireguardPatches(netip.MustParsePrefix("172.20.1.0/30"), nodes, 1); err == nil {
		t.Error("a /30 for three nodes was accepted")
	}
}
