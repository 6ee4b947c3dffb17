package discoveryservice

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	clientpb "github.com/siderolabs/discovery-api/api/v1alpha1/client/pb"
	"github.com/siderolabs/discovery-client/pkg/client"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// node is one discovery-client of a test, as a node runs it.
type node struct {
	c        *client.Client
	notify   chan struct{}
	hostname string
	address  netip.Addr
	pubKey   string
}

// startNode runs a discovery-client Client against addr and publishes its affiliate.
func startNode(ctx context.Context, t *testing.T, addr, clusterID string, key []byte, hostname, address string) *node {
	t.Helper()

	block, err := aes.NewCipher(key)
	if err != nil {
		t.Fatal(err)
	}

	// As a node does, the affiliate ID is the node ID, which says nothing about the node.
	sum := sha256.Sum256([]byte(hostname))
	nodeID := base64.RawURLEncoding.EncodeToString(sum[:12])

	c, err := client.NewClient(client.Options{
		Cipher: block, Endpoint: addr, ClusterID: clusterID, AffiliateID: nodeID,
		ClientVersion: "v1.11.0", TTL: 5 * time.Minute, Insecure: true,
	})
	if err != nil {
		t.Fatal(err)
	}

	n := &node{c: c, notify: make(chan struct{}, 1), hostname: hostname, address: netip.MustParseAddr(address),
		pubKey: hostname + "-wireguard-public-key="}
	ip := n.address.AsSlice()

	if err = c.SetLocalData(&client.Affiliate{
		Affiliate: &clientpb.Affiliate{
			NodeId: nodeID, Hostname: hostname, Nodename: hostname, MachineType: "controlplane",
			OperatingSystem: "Talos (v1.11.0)", Addresses: [][]byte{ip},
			Kubespan: &clientpb.KubeSpan{PublicKey: n.pubKey, Address: ip},
		},
		Endpoints: []*clientpb.Endpoint{{Ip: ip, Port: 51820}, {Ip: ip, Port: 51821}},
	}, nil); err != nil {
		t.Fatal(err)
	}

	var wg sync.WaitGroup

	runCtx, cancel := context.WithCancel(ctx)

	wg.Go(func() {
		if err := c.Run(runCtx, zaptest.NewLogger(t), n.notify); err != nil && runCtx.Err() == nil {
			t.Errorf("%s: discovery client: %v", hostname, err)
		}
	})

	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})

	return n
}

// waitFor waits on n's notifications until cond holds for its discovered affiliates.
func (n *node) waitFor(ctx context.Context, t *testing.T, what string, cond func([]*client.Affiliate) bool) []*client.Affiliate {
	t.Helper()

	for {
		if got := n.c.GetAffiliates(); cond(got) {
			return got
		}

		select {
		case <-n.notify:
		case <-ctx.Done():
			t.Fatalf("%s: %s did not happen: it sees %d affiliates", n.hostname, what, len(n.c.GetAffiliates()))
		}
	}
}

func hostnames(as []*client.Affiliate) []string {
	var out []string
	for _, a := range as {
		out = append(out, a.Affiliate.GetHostname())
	}

	slices.Sort(out)

	return out
}

// pairScenario runs two nodes of one cluster against addr, waits until each has decrypted the
// other, and returns them.
func pairScenario(ctx context.Context, t *testing.T, addr string, key []byte) (alpha, beta *node) {
	t.Helper()

	alpha = startNode(ctx, t, addr, "cluster-one", key, "secret-node-alpha", "172.20.33.44")
	beta = startNode(ctx, t, addr, "cluster-one", key, "secret-node-beta", "fd00:1234:5678::9abc")

	for _, pair := range [][2]*node{{alpha, beta}, {beta, alpha}} {
		self, other := pair[0], pair[1]

		got := self.waitFor(ctx, t, "seeing "+other.hostname, func(as []*client.Affiliate) bool {
			return slices.Equal(hostnames(as), []string{other.hostname})
		})

		a := got[0]
		if len(a.Affiliate.GetAddresses()) != 1 || !bytes.Equal(a.Affiliate.GetAddresses()[0], other.address.AsSlice()) ||
			a.Affiliate.GetKubespan().GetPublicKey() != other.pubKey {
			t.Errorf("%s decrypted %s as %v", self.hostname, other.hostname, a.Affiliate)
		}

		if len(a.Endpoints) != 2 || a.Endpoints[0].GetPort()+a.Endpoints[1].GetPort() != 51820+51821 ||
			!bytes.Equal(a.Endpoints[0].GetIp(), other.address.AsSlice()) {
			t.Errorf("%s decrypted %s's endpoints as %v", self.hostname, other.hostname, a.Endpoints)
		}
	}

	return alpha, beta
}

func TestDiscoveryClientInterop(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	r := serve(t, Options{}, nil)
	key := randomKey(t)

	alpha, _ := pairScenario(ctx, t, r.addr, key)

	// Hello told the client its address as the server saw it.
	if ip := alpha.c.GetPublicIP(); !bytes.Equal(ip, []byte{127, 0, 0, 1}) {
		t.Errorf("public IP from Hello: %v, want 127.0.0.1", ip)
	}

	// Another cluster (its own ID, its own key) sees its own members only, from its first
	// watch snapshot on: the two nodes of cluster-one were there before it came.
	key2 := randomKey(t)
	gamma := startNode(ctx, t, r.addr, "cluster-two", key2, "node-gamma", "10.9.8.7")
	startNode(ctx, t, r.addr, "cluster-two", key2, "node-delta", "10.9.8.6")

	gamma.waitFor(ctx, t, "seeing node-delta", func(as []*client.Affiliate) bool {
		return slices.Contains(hostnames(as), "node-delta")
	})

	if got := hostnames(gamma.c.GetAffiliates()); !slices.Equal(got, []string{"node-delta"}) {
		t.Errorf("a node of cluster-two sees %v, want only node-delta", got)
	}
}

// TestServerSeesOnlyCiphertext records every byte the server reads and every request message
// it decodes while two nodes exchange affiliates, and looks for what the nodes said in it.
func TestServerSeesOnlyCiphertext(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	svc, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}

	var (
		mu       sync.Mutex
		requests [][]byte
	)

	keep := func(m any) {
		if msg, ok := m.(proto.Message); ok {
			b, err := proto.Marshal(msg)
			if err != nil {
				t.Error(err)
			}

			mu.Lock()
			requests = append(requests, b)
			mu.Unlock()
		}
	}

	g := grpc.NewServer(
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			keep(req)

			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			return h(srv, &recordedStream{ServerStream: ss, keep: keep})
		}),
	)
	svc.Register(g)

	l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}

	rec := &recorder{Listener: l}

	go g.Serve(rec)

	t.Cleanup(g.Stop)

	alpha, beta := pairScenario(ctx, t, l.Addr().String(), randomKey(t))

	raw := rec.bytes()

	mu.Lock()
	all := append(slices.Clone(requests), raw)
	mu.Unlock()

	// The recording works: the cluster ID, which is not secret, is in it.
	if !bytes.Contains(raw, []byte("cluster-one")) || len(all) < 4 {
		t.Fatalf("recorded %d requests and %d bytes without the cluster ID: the recording is broken", len(all)-1, len(raw))
	}

	for _, n := range []*node{alpha, beta} {
		secrets := map[string][]byte{
			"hostname":         []byte(n.hostname),
			"address as text":  []byte(n.address.String()),
			"address as bytes": n.address.AsSlice(),
			"KubeSpan key":     []byte(n.pubKey),
			"operating system": []byte("Talos (v1.11.0)"),
			"machine type":     []byte("controlplane"),
			"endpoint":         mustMarshal(t, &clientpb.Endpoint{Ip: n.address.AsSlice(), Port: 51820}),
		}

		for what, secret := range secrets {
			for i, b := range all {
				if bytes.Contains(b, secret) {
					t.Errorf("%s's %s (%q) is in plaintext in what the server received (record %d of %d)",
						n.hostname, what, secret, i, len(all))
				}
			}
		}
	}
}

type recordedStream struct {
	grpc.ServerStream

	keep func(any)
}

func (s *recordedStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if err == nil {
		s.keep(m)
	}

	return err
}

func randomKey(t *testing.T) []byte {
	t.Helper()

	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}

	return key
}

func mustMarshal(t *testing.T, m proto.Message) []byte {
	t.Helper()

	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}

	return b
}
