package network

import (
	"fmt"
	"net"
	"slices"

	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"golang.zx2c4.com/wireguard/wgctrl"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// configureWireguard gives the WireGuard link its key, port, mark and peers (all of them: the
// spec's peers replace the link's).
func configureWireguard(name string, spec network.WireguardSpec) error {
	key, err := wgtypes.ParseKey(spec.PrivateKey)
	if err != nil {
		return fmt.Errorf("machine.network.interfaces[%s].wireguard.privateKey: %w", name, err)
	}

	cfg := wgtypes.Config{PrivateKey: &key, ReplacePeers: true}

	if spec.ListenPort != 0 {
		cfg.ListenPort = &spec.ListenPort
	}

	if spec.FirewallMark != 0 {
		cfg.FirewallMark = &spec.FirewallMark
	}

	for _, p := range spec.Peers {
		pub, err := wgtypes.ParseKey(p.PublicKey)
		if err != nil {
			return fmt.Errorf("machine.network.interfaces[%s].wireguard.peers: publicKey %q: %w", name, p.PublicKey, err)
		}

		peer := wgtypes.PeerConfig{PublicKey: pub, ReplaceAllowedIPs: true}

		if p.PresharedKey != "" {
			psk, err := wgtypes.ParseKey(p.PresharedKey)
			if err != nil {
				return fmt.Errorf("machine.network.interfaces[%s].wireguard.peers: a preshared key: %w", name, err)
			}

			peer.PresharedKey = &psk
		}

		if p.Endpoint != "" {
			if peer.Endpoint, err = net.ResolveUDPAddr("udp", p.Endpoint); err != nil {
				return fmt.Errorf("machine.network.interfaces[%s].wireguard.peers: endpoint %q: %w", name, p.Endpoint, err)
			}
		}

		if p.PersistentKeepaliveInterval != 0 {
			peer.PersistentKeepaliveInterval = &p.PersistentKeepaliveInterval
		}

		for _, a := range p.AllowedIPs {
			peer.AllowedIPs = append(peer.AllowedIPs, net.IPNet{IP: a.Addr().AsSlice(), Mask: net.CIDRMask(a.Bits(), a.Addr().BitLen())})
		}

		cfg.Peers = append(cfg.Peers, peer)
	}

	c, err := wgctrl.New()
	if err != nil {
		return fmt.Errorf("WireGuard: %w", err)
	}
	defer c.Close()

	if err = c.ConfigureDevice(name, cfg); err != nil {
		return fmt.Errorf("configuring WireGuard link %s: %w", name, err)
	}

	return nil
}

// sameWireguard tells two specs apart (the peers' order matters not).
func sameWireguard(a, b network.WireguardSpec) bool {
	if a.PrivateKey != b.PrivateKey || a.ListenPort != b.ListenPort || a.FirewallMark != b.FirewallMark || len(a.Peers) != len(b.Peers) {
		return false
	}

	for _, p := range a.Peers {
		if !slices.ContainsFunc(b.Peers, func(q network.WireguardPeer) bool {
			return p.PublicKey == q.PublicKey && p.PresharedKey == q.PresharedKey && p.Endpoint == q.Endpoint &&
				p.PersistentKeepaliveInterval == q.PersistentKeepaliveInterval && slices.Equal(p.AllowedIPs, q.AllowedIPs)
		}) {
			return false
		}
	}

	return true
}
