package etcd

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/talos-go/talos/internal/testenv"
)

func addrs(s ...string) []netip.Addr {
	out := make([]netip.Addr, 0, len(s))
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}

	return out
}

func TestSelectEndpoints(t *testing.T) {
	node := EndpointsInput{Address: netip.MustParseAddr("10.5.0.2"), Addresses: addrs("10.5.0.2", "192.168.7.2", "fd00::2")}

	tests := []struct {
		name                                string
		mod                                 func(*EndpointsInput)
		advertise, listenPeer, listenClient []netip.Addr
		wantErr                             string
	}{
		{
			name:      "no subnets: the node's address only",
			advertise: addrs("10.5.0.2"), listenPeer: addrs("10.5.0.2"), listenClient: addrs("10.5.0.2"),
		},
		{
			name:      "no subnets, own network: clients also on loopback",
			mod:       func(in *EndpointsInput) { in.Loopback = true },
			advertise: addrs("10.5.0.2"), listenPeer: addrs("10.5.0.2"), listenClient: addrs("10.5.0.2", "127.0.0.1"),
		},
		{
			name: "advertised subnet picks the address in it; listen follows it (the config's default)",
			mod: func(in *EndpointsInput) {
				in.AdvertisedSubnets, in.ListenSubnets, in.Loopback = []string{"192.168.0.0/16"}, []string{"192.168.0.0/16"}, true
			},
			advertise: addrs("192.168.7.2"), listenPeer: addrs("192.168.7.2"), listenClient: addrs("192.168.7.2", "127.0.0.1"),
		},
		{
			name: "every address in the advertised subnets, less a negated one",
			mod: func(in *EndpointsInput) {
				in.AdvertisedSubnets = []string{"0.0.0.0/0", "::/0", "!10.5.0.0/24"}
				in.ListenSubnets = []string{"10.5.0.2", "fd00::/8"}
			},
			advertise: addrs("192.168.7.2", "fd00::2"), listenPeer: addrs("10.5.0.2", "fd00::2"), listenClient: addrs("10.5.0.2", "fd00::2"),
		},
		{
			name: "a VIP is never advertised",
			mod: func(in *EndpointsInput) {
				in.Addresses = append(in.Addresses, netip.MustParseAddr("10.5.0.100"))
				in.AdvertisedSubnets, in.Exclude = []string{"10.5.0.0/24"}, []string{"10.5.0.100"}
			},
			advertise: addrs("10.5.0.2"), listenPeer: addrs("10.5.0.2"), listenClient: addrs("10.5.0.2"),
		},
		{
			name:    "advertised subnets matching no address",
			mod:     func(in *EndpointsInput) { in.AdvertisedSubnets = []string{"172.16.0.0/12"} },
			wantErr: "cluster.etcd.advertisedSubnets [172.16.0.0/12] match none of the node's addresses",
		},
		{
			name:    "listen subnets matching no address",
			mod:     func(in *EndpointsInput) { in.ListenSubnets = []string{"!10.5.0.2"} },
			wantErr: "cluster.etcd.listenSubnets [!10.5.0.2] match none",
		},
		{
			name:    "a subnet that does not parse",
			mod:     func(in *EndpointsInput) { in.AdvertisedSubnets = []string{"10.5.0.0/33"} },
			wantErr: "cluster.etcd.advertisedSubnets [10.5.0.0/33]",
		},
	}

	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := node
			in.Addresses = slices.Clone(node.Addresses)

			if tt.mod != nil {
				tt.mod(&in)
			}

			got, err := SelectEndpoints(in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %v, want error %q", err, tt.wantErr)
				}

				return
			}

			if err != nil {
				t.Fatal(err)
			}

			for what, pair := range map[string][2][]netip.Addr{
				"advertise": {got.Advertise, tt.advertise}, "listen peer": {got.ListenPeer, tt.listenPeer}, "listen client": {got.ListenClient, tt.listenClient},
			} {
				if !slices.Equal(pair[0], pair[1]) {
					t.Errorf("%s: %v, want %v", what, pair[0], pair[1])
				}
			}
		})
	}
}

func TestArgsWithEndpoints(t *testing.T) {
	args, err := Args(ArgsInput{
		Binary: "/bin/etcd", Name: "cp-1", Address: "10.5.0.2", DataDir: "/d", Certs: CertPaths{Dir: "/s"},
		Endpoints: &Endpoints{
			Advertise:    addrs("192.168.7.2", "fd00::2"),
			ListenPeer:   addrs("192.168.7.2"),
			ListenClient: addrs("192.168.7.2", "127.0.0.1"),
		},
	})
	if err != nil {
		t.Fatal(err)
	}

	for _, w := range []string{
		"--advertise-client-urls=https://192.168.7.2:2379,https://[fd00::2]:2379",
		"--initial-advertise-peer-urls=https://192.168.7.2:2380,https://[fd00::2]:2380",
		"--listen-peer-urls=https://192.168.7.2:2380",
		"--listen-client-urls=https://192.168.7.2:2379,https://127.0.0.1:2379",
	} {
		if !slices.Contains(args, w) {
			t.Errorf("missing %q in %v", w, args)
		}
	}
}

// A real etcd member with three addresses, cluster.etcd.advertisedSubnets choosing one and
// listenSubnets two: the member list carries only the advertised address's URLs, and etcd
// answers only on the listened addresses (the node's main address refuses connections).
func TestEtcdAdvertisedAndListenSubnets(t *testing.T) {
	caCert, caKey, err := testCA()
	if err != nil {
		t.Fatal(err)
	}

	c := newTestCluster(t, 1, caCert, caKey)
	n := c.nodes[0]

	main := netip.MustParseAddr(c.addrs[0])
	second, third := main.Next().Next(), main.Next().Next().Next()

	n.opts.Init = true
	n.opts.Addresses = []netip.Addr{second, third}
	n.opts.AdvertisedSubnets = []string{"127.0.0.0/8", "!" + main.String(), "!" + third.String() + "/32"}
	n.opts.ListenSubnets = []string{second.String(), third.String() + "/32"}

	n.start()

	testenv.WaitFor(t, "the member healthy", 2*time.Minute, func() error {
		return c.votersHealthy(n, 1)
	})

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	members, err := n.m.Members(ctx, false)
	if err != nil {
		t.Fatal(err)
	}

	if len(members) != 1 {
		t.Fatalf("members: %+v", members)
	}

	if want := []string{"https://" + second.String() + ":2380"}; !slices.Equal(members[0].PeerURLs, want) {
		t.Errorf("peer URLs %v, want %v (advertisedSubnets)", members[0].PeerURLs, want)
	}

	if want := []string{"https://" + second.String() + ":2379"}; !slices.Equal(members[0].ClientURLs, want) {
		t.Errorf("client URLs %v, want %v (advertisedSubnets)", members[0].ClientURLs, want)
	}

	for _, tc := range []struct {
		addr   netip.Addr
		listen bool
	}{{second, true}, {third, true}, {main, false}} {
		for _, port := range []int{2379, 2380} {
			ep := net.JoinHostPort(tc.addr.String(), fmt.Sprint(port))

			conn, err := net.DialTimeout("tcp", ep, 2*time.Second)
			if conn != nil {
				conn.Close()
			}

			if (err == nil) != tc.listen {
				t.Errorf("connecting to %s: %v; want listening %v (listenSubnets %v)", ep, err, tc.listen, n.opts.ListenSubnets)
			}
		}
	}
}
