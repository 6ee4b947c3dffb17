// Package discoveryservice is our server of the upstream discovery API
// (github.com/siderolabs/discovery-api, service sidero.discovery.server.Cluster): the
// rendezvous where the nodes of a cluster publish their affiliates (hostname, addresses,
// KubeSpan identity) and watch each other's. Nodes encrypt everything before sending it, so
// the server stores and relays opaque bytes keyed by cluster and affiliate ID; it sees IDs,
// sizes, expiries and the client's IP, never what the nodes say.
//
// Behaviour follows upstream's discovery-service: AffiliateUpdate merges endpoints and
// extends the expiry by the request's TTL, expired affiliates are collected and their
// watchers told, Watch starts with the current list. The state is kept in memory and written
// to an optional snapshot file, so a restart does not make every cluster rediscover itself.
package discoveryservice

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/siderolabs/discovery-api/api/v1alpha1/server/pb"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
)

// Limits bound what one client or all of them together can make the server hold.
type Limits struct {
	// Byte sizes.
	ClusterIDMax, AffiliateIDMax, AffiliateDataMax, EndpointMax int
	// Counts.
	EndpointsPerAffiliate, AffiliatesPerCluster, Clusters int
	// TTLMax is the longest TTL an update may ask for.
	TTLMax time.Duration
	// RequestsPerSecond and Burst are a token bucket per source IP.
	RequestsPerSecond float64
	Burst             int
}

// DefaultLimits returns upstream discovery-service's limits (its pkg/limits: sizes, counts,
// TTL, and the per-IP rate of 15 requests per second with a burst of 60). Clusters is ours:
// upstream has no bound on the number of clusters; 100,000 clusters of five nodes hold about
// 330 MB (about 660 bytes per affiliate, BenchmarkMemoryPer1000Affiliates).
func DefaultLimits() Limits {
	return Limits{
		ClusterIDMax:          256,
		AffiliateIDMax:        256,
		AffiliateDataMax:      2048,
		EndpointMax:           32,
		EndpointsPerAffiliate: 64,
		AffiliatesPerCluster:  1024,
		Clusters:              100_000,
		TTLMax:                30 * time.Minute,
		RequestsPerSecond:     15,
		Burst:                 60,
	}
}

// withDefaults fills each zero field from DefaultLimits, so a test can set only the limit it
// is about.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits()

	pick := func(v *int, def int) {
		if *v == 0 {
			*v = def
		}
	}

	pick(&l.ClusterIDMax, d.ClusterIDMax)
	pick(&l.AffiliateIDMax, d.AffiliateIDMax)
	pick(&l.AffiliateDataMax, d.AffiliateDataMax)
	pick(&l.EndpointMax, d.EndpointMax)
	pick(&l.EndpointsPerAffiliate, d.EndpointsPerAffiliate)
	pick(&l.AffiliatesPerCluster, d.AffiliatesPerCluster)
	pick(&l.Clusters, d.Clusters)
	pick(&l.Burst, d.Burst)

	if l.TTLMax == 0 {
		l.TTLMax = d.TTLMax
	}

	if l.RequestsPerSecond == 0 {
		l.RequestsPerSecond = d.RequestsPerSecond
	}

	return l
}

// DefaultSnapshotInterval is upstream's interval between snapshots.
const DefaultSnapshotInterval = 10 * time.Minute

// Upstream's GC runs each minute; ours also wakes at the next expiry, but no more often than
// each second, so a short TTL is honoured promptly without a scan per request.
const (
	gcIntervalMax = time.Minute
	gcIntervalMin = time.Second
	// stopGrace bounds GracefulStop: unary calls are short and watches are ended at once, so
	// only a stuck client can take longer.
	stopGrace = 5 * time.Second
)

// Options configure a Service.
type Options struct {
	SnapshotPath     string        // "" = no snapshot
	SnapshotInterval time.Duration // 0 = DefaultSnapshotInterval
	Limits           Limits        // a zero field takes DefaultLimits' value
	Now              func() time.Time
	Logger           *zap.Logger
}

// Service is one discovery server: its state, limits and metrics.
type Service struct {
	opts     Options
	limits   Limits
	store    *store
	limiter  *ipLimiter
	metrics  *metrics
	now      func() time.Time
	log      *zap.Logger
	stopping chan struct{}
	stopOnce sync.Once
}

// New returns a Service holding what the snapshot file has, if there is one.
func New(opts Options) (*Service, error) {
	s := &Service{opts: opts, limits: opts.Limits.withDefaults(), now: opts.Now, log: opts.Logger, stopping: make(chan struct{})}

	if s.now == nil {
		s.now = time.Now
	}

	if s.log == nil {
		s.log = zap.NewNop()
	}

	if s.opts.SnapshotInterval <= 0 {
		s.opts.SnapshotInterval = DefaultSnapshotInterval
	}

	s.store = newStore(s.limits)
	s.limiter = newIPLimiter(s.limits.RequestsPerSecond, s.limits.Burst, s.now)
	s.metrics = newMetrics(s.store)

	if opts.SnapshotPath != "" {
		if err := s.store.loadSnapshot(opts.SnapshotPath, s.now()); err != nil {
			return nil, err
		}
	}

	return s, nil
}

// Register adds the Cluster service to g. Validation, limits and metrics come with it; the
// collection of expired affiliates and the snapshots run only under Serve (a caller serving
// its own g still never sees an expired affiliate listed).
func (s *Service) Register(g *grpc.Server) {
	pb.RegisterClusterServer(g, &clusterServer{s: s})
}

// Metrics serves the Service's metrics in Prometheus' text format.
func (s *Service) Metrics() http.Handler {
	return s.metrics.handler()
}

// ServerOptions are the gRPC server options Serve uses: message size, keepalive and stream
// bounds sized from the limits.
func (s *Service) serverOptions() []grpc.ServerOption {
	l := s.limits
	// The largest valid request is an AffiliateUpdate at every limit; 4 KiB covers the framing.
	maxRecv := l.ClusterIDMax + l.AffiliateIDMax + l.AffiliateDataMax + l.EndpointsPerAffiliate*(l.EndpointMax+8) + 4096

	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(maxRecv),
		// The client pings every max(10 s, TTL/10) (discovery-client GRPCDialOptions): allow
		// that, and close connections that ping faster.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 2 * time.Minute, Timeout: 20 * time.Second}),
		// A node needs one Watch and a unary call at a time.
		grpc.MaxConcurrentStreams(16),
		grpc.ConnectionTimeout(10 * time.Second),
		grpc.SharedWriteBuffer(true),
		grpc.ReadBufferSize(16 * 1024),
		grpc.WriteBufferSize(16 * 1024),
	}
}

// Serve serves the Cluster service on l (TLS when tlsConfig is set, plain gRPC otherwise)
// until ctx is done; then it ends the watches, stops gracefully (at most stopGrace) and writes
// a last snapshot.
func (s *Service) Serve(ctx context.Context, l net.Listener, tlsConfig *tls.Config) error {
	opts := s.serverOptions()
	if tlsConfig != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tlsConfig)))
	}

	g := grpc.NewServer(opts...)
	s.Register(g)

	loopCtx, stopLoops := context.WithCancel(ctx)
	defer stopLoops()

	var wg sync.WaitGroup

	wg.Go(func() { s.collectLoop(loopCtx) })

	if s.opts.SnapshotPath != "" {
		wg.Go(func() { s.snapshotLoop(loopCtx) })
	}

	served := make(chan error, 1)

	go func() { served <- g.Serve(l) }()

	var serveErr error

	select {
	case <-ctx.Done():
	case serveErr = <-served:
	}

	s.stopOnce.Do(func() { close(s.stopping) })

	stopped := make(chan struct{})

	go func() {
		g.GracefulStop()
		close(stopped)
	}()

	select {
	case <-stopped:
	case <-time.After(stopGrace):
		g.Stop()
		<-stopped
	}

	stopLoops()
	wg.Wait()

	if s.opts.SnapshotPath != "" {
		if err := s.store.saveSnapshot(s.opts.SnapshotPath); err != nil {
			serveErr = errors.Join(serveErr, err)
		}
	}

	if serveErr != nil && !errors.Is(serveErr, grpc.ErrServerStopped) {
		return fmt.Errorf("serving the discovery service on %s: %w", l.Addr(), serveErr)
	}

	return nil
}

// collectLoop removes expired affiliates at the next expiry (bounded by gcIntervalMin and
// gcIntervalMax), or sooner when an update brings the next expiry closer.
func (s *Service) collectLoop(ctx context.Context) {
	timer := time.NewTimer(0)
	defer timer.Stop()

	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
			s.store.collect(s.now())
			s.limiter.collect()
		case <-s.store.wake:
		}

		wait := gcIntervalMax
		if next := s.store.nextExpiry(); !next.IsZero() {
			wait = min(max(next.Sub(s.now()), gcIntervalMin), gcIntervalMax)
		}

		timer.Reset(wait)
	}
}

func (s *Service) snapshotLoop(ctx context.Context) {
	ticker := time.NewTicker(s.opts.SnapshotInterval)
	defer ticker.Stop()

	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			if err := s.store.saveSnapshot(s.opts.SnapshotPath); err != nil {
				s.log.Warn("discovery snapshot failed", zap.Error(err))
			}
		}
	}
}
