package provision

import (
	"encoding/json"
	"fmt"
	"net/netip"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// WireguardPort is the control planes' WireGuard port with --wireguard-cidr (upstream's).
const WireguardPort = 51111

// wireguardPatches are --wireguard-cidr's config patches, one per node (in the nodes' order),
// as upstream's: a link wg0 with the node's address in the network (its 2nd, 3rd, ...), a key
// of its own, and every other node as a peer (allowed its own address, kept alive every 5 s);
// the control planes listen on WireguardPort and are the peers with endpoints.
func wireguardPatches(cidr netip.Prefix, nodes []netip.Addr, controlPlanes int) ([]string, error) {
	type peer struct {
		PublicKey                   string   `json:"publicKey"`
		Endpoint                    string   `json:"endpoint,omitempty"`
		PersistentKeepaliveInterval string   `json:"persistentKeepaliveInterval"`
		AllowedIPs                  []string `json:"allowedIPs"`
	}

	keys := make([]wgtypes.Key, len(nodes))
	addrs := make([]netip.Addr, len(nodes))
	peers := make([]peer, len(nodes))

	a := cidr.Masked().Addr().Next()

	for i, n := range nodes {
		a = a.Next()
		if !cidr.Contains(a) {
			return nil, fmt.Errorf("--wireguard-cidr %s has no address for node %d: give a larger network", cidr, i+1)
		}

		key, err := wgtypes.GeneratePrivateKey()
		if err != nil {
			return nil, err
		}

		keys[i], addrs[i] = key, a
		peers[i] = peer{PublicKey: key.PublicKey().String(), PersistentKeepaliveInterval: "5s", AllowedIPs: []string{netip.PrefixFrom(a, a.BitLen()).String()}}

		if i < controlPlanes {
			peers[i].Endpoint = netip.AddrPortFrom(n, WireguardPort).String()
		}
	}

	patches := make([]string, len(nodes))

	for i := range nodes {
		wg := map[string]any{"privateKey": keys[i].String()}
		if i < controlPlanes {
			wg["listenPort"] = WireguardPort
		}

		var others []peer

		for j, p := range peers {
			if j != i {
				others = append(others, p)
			}
		}

		wg["peers"] = others

		b, err := json.Marshal(map[string]any{"machine": map[string]any{"network": map[string]any{"interfaces": []any{map[string]any{
			"interface": "wg0", "mtu": 1500, "addresses": []string{netip.PrefixFrom(addrs[i], cidr.Bits()).String()}, "wireguard": wg,
		}}}}})
		if err != nil {
			return nil, err
		}

		patches[i] = string(b)
	}

	return patches, nil
}
