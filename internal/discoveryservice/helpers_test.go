package discoveryservice

import (
	"bytes"
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/siderolabs/discovery-api/api/v1alpha1/server/pb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"
)

// running is a Service serving on loopback, as a test started it.
type running struct {
	svc  *Service
	addr string
	stop func() error // cancels Serve and returns what it returned
}

// serve starts a Service with opts on 127.0.0.1:0; wrap, when set, wraps the listener. The
// service is stopped at the end of the test if the test did not stop it.
func serve(t *testing.T, opts Options, wrap func(net.Listener) net.Listener) *running {
	t.Helper()

	svc, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}

	l, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}

	addr := l.Addr().String()

	if wrap != nil {
		l = wrap(l)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)

	go func() { done <- svc.Serve(ctx, l, nil) }()

	var once sync.Once

	var result error

	stop := func() error {
		once.Do(func() {
			cancel()

			select {
			case result = <-done:
			case <-time.After(2 * stopGrace):
				t.Errorf("Serve did not return within %s of its context ending", 2*stopGrace)
			}
		})

		return result
	}

	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("Serve: %v", err)
		}
	})

	return &running{svc: svc, addr: addr, stop: stop}
}

// client returns a raw API client of r (for what discovery-client does not expose).
func (r *running) client(t *testing.T) pb.ClusterClient {
	t.Helper()

	conn, err := grpc.NewClient(r.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { conn.Close() })

	return pb.NewClusterClient(conn)
}

func update(clusterID, id string, data []byte, ttl time.Duration, endpoints ...[]byte) *pb.AffiliateUpdateRequest {
	return &pb.AffiliateUpdateRequest{
		ClusterId: clusterID, AffiliateId: id, AffiliateData: data, AffiliateEndpoints: endpoints,
		Ttl: durationpb.New(ttl),
	}
}

// listed returns List's affiliates by ID.
func listed(ctx context.Context, t *testing.T, c pb.ClusterClient, clusterID string) map[string]*pb.Affiliate {
	t.Helper()

	resp, err := c.List(ctx, &pb.ListRequest{ClusterId: clusterID})
	if err != nil {
		t.Fatalf("List %s: %v", clusterID, err)
	}

	out := map[string]*pb.Affiliate{}
	for _, a := range resp.GetAffiliates() {
		out[a.GetId()] = a
	}

	return out
}

func sameAffiliate(a, b *pb.Affiliate) bool {
	if a.GetId() != b.GetId() || !bytes.Equal(a.GetData(), b.GetData()) || len(a.GetEndpoints()) != len(b.GetEndpoints()) {
		return false
	}

	for i := range a.GetEndpoints() {
		if !bytes.Equal(a.GetEndpoints()[i], b.GetEndpoints()[i]) {
			return false
		}
	}

	return true
}

// recorder keeps every byte the server reads from its connections.
type recorder struct {
	net.Listener

	mu  sync.Mutex
	buf bytes.Buffer
}

func (r *recorder) Accept() (net.Conn, error) {
	c, err := r.Listener.Accept()
	if err != nil {
		return nil, err
	}

	return &recordedConn{Conn: c, r: r}, nil
}

func (r *recorder) bytes() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()

	return bytes.Clone(r.buf.Bytes())
}

type recordedConn struct {
	net.Conn

	r *recorder
}

func (c *recordedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)

	c.r.mu.Lock()
	c.r.buf.Write(p[:n])
	c.r.mu.Unlock()

	return n, err
}
