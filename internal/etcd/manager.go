// Package etcd runs and manages this node's etcd member: certificates from the cluster's etcd
// CA, the command line, the bootstrap / join-as-learner / promotion logic, member management
// with a quorum check before a member leaves, and snapshot / recover.
//
// Start rule: a control plane's etcd starts only when one of these holds:
//   - its data folder already holds a member (a restart): it starts from that data;
//   - Bootstrap was called on it: it starts a new single-member cluster (optionally recovered
//     from an uploaded snapshot);
//   - an existing cluster answers at one of the peer addresses (Options.Peers): the node adds
//     itself as a learner, starts with initial-cluster-state=existing, and is promoted to a
//     voting member once it has caught up with the leader.
//
// Until then it waits, retrying the join.
package etcd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/talos-go/talos/internal/machined/system"
)

// Errors returned by the manager; the API maps them to gRPC codes.
var (
	// ErrAlreadyBootstrapped: this node already holds etcd data or was already bootstrapped.
	ErrAlreadyBootstrapped = errors.New("etcd is already bootstrapped on this node (the etcd data directory is not empty)")
	// ErrClusterExists: a cluster already answers at one of the peers.
	ErrClusterExists = errors.New("an etcd cluster already exists")
	// ErrJoining: the node is joining an existing cluster.
	ErrJoining = errors.New("this node is joining an existing etcd cluster")
	// ErrQuorum: the operation would lose quorum.
	ErrQuorum = errors.New("operation would lose etcd quorum")
	// ErrNotMember: this node is not (or no longer) a member.
	ErrNotMember = errors.New("this node is not an etcd member")
	// ErrNotRunning: etcd is not running on this node.
	ErrNotRunning = errors.New("etcd is not running on this node")
	// ErrNoSnapshot: recovery asked for without an uploaded snapshot.
	ErrNoSnapshot = errors.New("no etcd snapshot was uploaded for recovery (EtcdRecover)")
	// ErrSnapshotHash: the uploaded snapshot's integrity hash does not match.
	ErrSnapshotHash = errors.New("etcd snapshot integrity check failed")
	// ErrNotConfigured: the node cannot run etcd (no config, not a control plane, no binary).
	ErrNotConfigured = errors.New("etcd is not configured on this node")
	// ErrInvalid: a request argument is wrong.
	ErrInvalid = errors.New("invalid request")
)

// Options is this node's etcd setup, re-read at every start of the service.
type Options struct {
	Binary         string // the etcd command
	Name           string // member name
	Address        string // node address: peer and client URLs are on it
	ClientPort     int    // 2379 unless set
	PeerPort       int    // 2380 unless set
	ListenLoopback bool
	DataDir        string // EPHEMERAL/lib/etcd
	SecretsDir     string // Secrets("etcd")
	SnapshotPath   string // where an uploaded recovery snapshot is kept (outside DataDir)
	CACert, CAKey  []byte // cluster.etcd.ca (PEM)
	ClusterToken   string
	ExtraArgs      map[string]string
	// Addresses are the node's other addresses, and AdvertisedSubnets, ListenSubnets and
	// ExcludeSubnets (VIPs) choose among them and Address what etcd advertises and listens
	// on (SelectEndpoints).
	Addresses                                        []netip.Addr
	AdvertisedSubnets, ListenSubnets, ExcludeSubnets []string
	// Init is an init node's (machine.type init, upstream's legacy first control plane): with
	// no data and no cluster answering at a peer, it bootstraps itself, unasked.
	Init bool

	// Peers returns the addresses (IPs or names, no port) where other control planes' etcd may
	// answer on ClientPort. Own address may be included; it is skipped.
	Peers func(ctx context.Context) ([]string, error)

	// Env is added to etcd's environment (machine.env).
	Env []string
	// OOMScoreAdj is etcd's oom_score_adj (upstream's -998), for the process runner.
	OOMScoreAdj int
	// Runner, when set, runs etcd with these args (containerd in container mode); nil runs it as
	// a confined process.
	Runner func(args []string) system.Runner

	Output io.Writer // etcd's output (service log)
	Log    *zap.Logger

	JoinRetry       time.Duration // between join attempts (default 2s)
	PromoteInterval time.Duration // between promotion attempts (default 1s)

	endpoints Endpoints // chosen by opts()
}

func (o *Options) defaults() {
	if o.ClientPort == 0 {
		o.ClientPort = DefaultClientPort
	}

	if o.PeerPort == 0 {
		o.PeerPort = DefaultPeerPort
	}

	if o.JoinRetry == 0 {
		o.JoinRetry = time.Second
	}

	if o.PromoteInterval == 0 {
		o.PromoteInterval = time.Second
	}

	if o.Log == nil {
		o.Log = zap.NewNop()
	}

	if o.Output == nil {
		o.Output = io.Discard
	}

	if o.SnapshotPath == "" {
		o.SnapshotPath = filepath.Join(filepath.Dir(o.DataDir), "etcd.snapshot")
	}
}

// clientURL is where this node's member is asked: its first advertised address.
func (o *Options) clientURL() string { return ClientURL(o.advertised(), o.ClientPort) }
func (o *Options) peerURL() string   { return PeerURL(o.advertised(), o.PeerPort) }

func (o *Options) advertised() string {
	if len(o.endpoints.Advertise) > 0 {
		return o.endpoints.Advertise[0].String()
	}

	return o.Address
}

// peerURLs are every peer URL this member advertises.
func (o *Options) peerURLs() []string {
	if len(o.endpoints.Advertise) == 0 {
		return []string{o.peerURL()}
	}

	return urls(o.endpoints.Advertise, o.PeerPort, PeerURL)
}

// isSelf reports whether host is one of this node's addresses (Peers may list it).
func (o *Options) isSelf(host string) bool {
	if sameHost(host, o.Address) {
		return true
	}

	for _, a := range append(slices.Clone(o.Addresses), o.endpoints.Advertise...) {
		if sameHost(host, a.String()) {
			return true
		}
	}

	return false
}

// selectEndpoints chooses the addresses from the options.
func (o *Options) selectEndpoints() error {
	addr, _ := netip.ParseAddr(o.Address) // a name is no address: Addresses are the candidates then

	ep, err := SelectEndpoints(EndpointsInput{
		Address: addr, Addresses: o.Addresses,
		AdvertisedSubnets: o.AdvertisedSubnets, ListenSubnets: o.ListenSubnets, Exclude: o.ExcludeSubnets,
		Loopback: o.ListenLoopback,
	})
	if err != nil && (len(o.AdvertisedSubnets) > 0 || len(o.ListenSubnets) > 0) {
		return err
	}

	// Without subnets a node named by a host name keeps it (no endpoints: Address is used).
	o.endpoints = ep

	return nil
}

// BootstrapOptions are the Bootstrap API's arguments.
type BootstrapOptions struct {
	Recover       bool // recover from the snapshot uploaded with ReceiveSnapshot
	SkipHashCheck bool
}

// Manager is one node's etcd member. It is safe for concurrent use.
type Manager struct {
	options func() (Options, error)

	mu         sync.Mutex
	bootstrap  *BootstrapOptions // requested, not yet taken by a start
	taken      *BootstrapOptions // a bootstrap taken by a start, until data exists
	joining    bool              // a join attempt is in progress
	joined     bool              // this node was added to an existing cluster
	left       bool              // left the cluster: do not start until Reset
	running    bool              // the etcd process is up
	phase      string
	recovering bool
	wake       chan struct{}
}

// NewManager makes a manager; options is called at every start and API call (the config may
// have changed).
func NewManager(options func() (Options, error)) *Manager {
	return &Manager{options: options, wake: make(chan struct{}, 1), phase: "Initialized"}
}

func (m *Manager) opts() (Options, error) {
	o, err := m.options()
	if err != nil {
		return o, fmt.Errorf("%w: %w", ErrNotConfigured, err)
	}

	o.defaults()

	if err = o.selectEndpoints(); err != nil {
		return o, fmt.Errorf("%w: %w", ErrNotConfigured, err)
	}

	return o, nil
}

// Phase is a human description of what the manager is doing (for logs and service events).
func (m *Manager) Phase() string {
	m.mu.Lock()
	defer m.mu.Unlock()

	return m.phase
}

func (m *Manager) setPhase(log *zap.Logger, p string) {
	m.mu.Lock()
	changed := m.phase != p
	m.phase = p
	m.mu.Unlock()

	if changed {
		log.Info("etcd: " + p)
	}
}

// HasData reports whether the data folder holds a member: its write-ahead log exists. (etcd
// creates member/snap before it validates a join; a member folder without a WAL is the
// leftover of a start that failed and must not be mistaken for data: etcd would start it as a
// new single-member cluster.)
func HasData(dataDir string) bool {
	entries, err := os.ReadDir(filepath.Join(dataDir, "member", "wal"))
	if err != nil {
		return false
	}

	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".wal") {
			return true
		}
	}

	return false
}

// clearIncomplete removes a data folder that holds no member (see HasData).
func clearIncomplete(o Options) error {
	entries, err := os.ReadDir(o.DataDir)
	if err != nil || len(entries) == 0 {
		return nil //nolint:nilerr // nothing there
	}

	o.Log.Warn("etcd: removing an incomplete data folder left by a failed start")

	if err := os.RemoveAll(o.DataDir); err != nil {
		return fmt.Errorf("removing incomplete etcd data: %w", err)
	}

	return nil
}

// Bootstrap asks this node to start a new cluster. It is refused when the node holds etcd
// data, was already bootstrapped, is joining, or when a cluster already answers at a peer.
// It returns once the request is recorded; the etcd service then starts the cluster.
func (m *Manager) Bootstrap(ctx context.Context, req BootstrapOptions) error {
	o, err := m.opts()
	if err != nil {
		return err
	}

	if err := m.checkBootstrap(o); err != nil {
		return err
	}

	if req.Recover {
		if err := verifySnapshot(o.SnapshotPath, req.SkipHashCheck); err != nil {
			return err
		}
	}

	// A cluster that already answers at a peer must not get a twin.
	if found, where := m.clusterAtPeers(ctx, o); found {
		return fmt.Errorf("%w at %s: this node joins it instead", ErrClusterExists, where)
	}

	// Let a join attempt in flight finish before deciding.
	for {
		m.mu.Lock()
		if !m.joining {
			break
		}
		m.mu.Unlock()

		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	defer m.mu.Unlock()

	if err := m.checkBootstrapLocked(o); err != nil {
		return err
	}

	m.bootstrap = &req

	select {
	case m.wake <- struct{}{}:
	default:
	}

	return nil
}

func (m *Manager) checkBootstrap(o Options) error {
	m.mu.Lock()
	defer m.mu.Unlock()

	return m.checkBootstrapLocked(o)
}

func (m *Manager) checkBootstrapLocked(o Options) error {
	switch {
	case m.joined:
		return fmt.Errorf("%w: this node joined it", ErrClusterExists)
	case m.bootstrap != nil || m.taken != nil:
		return fmt.Errorf("%w: bootstrap was already requested", ErrAlreadyBootstrapped)
	case HasData(o.DataDir):
		return ErrAlreadyBootstrapped
	case m.running:
		return fmt.Errorf("%w: etcd is already running as a member", ErrAlreadyBootstrapped)
	case m.left:
		return fmt.Errorf("%w: it left the cluster; reset it first", ErrNotMember)
	}

	return nil
}

// plan is how one start of etcd goes.
type plan struct {
	initialCluster string
	state          ClusterState
	recover        *BootstrapOptions
}

// prepare blocks until etcd may start, and says how.
func (m *Manager) prepare(ctx context.Context, o Options) (plan, error) {
	for {
		m.mu.Lock()
		left := m.left
		m.mu.Unlock()

		if !left {
			break
		}

		m.setPhase(o.Log, "left the cluster: waiting for a reset")

		select {
		case <-ctx.Done():
			return plan{}, ctx.Err()
		case <-m.wake:
		}
	}

	if HasData(o.DataDir) {
		m.mu.Lock()
		m.taken = nil
		m.mu.Unlock()

		return plan{}, nil
	}

	// A start that took the bootstrap and failed before etcd had data (its image, say): the
	// bootstrap was accepted, so this start makes it again.
	m.mu.Lock()
	if m.taken != nil && m.bootstrap == nil {
		m.bootstrap, m.taken = m.taken, nil
	}
	m.mu.Unlock()

	if o.Init {
		m.initBootstrap(ctx, o)
	}

	if err := clearIncomplete(o); err != nil {
		return plan{}, err
	}

	for {
		m.mu.Lock()
		if req := m.bootstrap; req != nil {
			m.bootstrap = nil
			m.taken = req
			m.mu.Unlock()

			m.setPhase(o.Log, "bootstrapping a new cluster")

			p := plan{
				initialCluster: o.initialCluster(),
				state:          ClusterStateNew,
			}

			if req.Recover {
				p.recover = req
			}

			return p, nil
		}

		m.joining = true
		m.mu.Unlock()

		initial, err := m.join(ctx, o)

		m.mu.Lock()
		m.joining = false
		m.joined = err == nil
		m.mu.Unlock()

		if err == nil {
			m.setPhase(o.Log, "joined the cluster as a learner")

			return plan{initialCluster: initial, state: ClusterStateExisting}, nil
		}

		m.setPhase(o.Log, fmt.Sprintf("waiting for bootstrap or an existing cluster (%v)", err))

		select {
		case <-ctx.Done():
			return plan{}, ctx.Err()
		case <-m.wake:
		case <-time.After(o.JoinRetry + time.Duration(rand.Int64N(int64(o.JoinRetry/2)+1))): //nolint:gosec // retry jitter, not a secret
		}
	}
}

// initBootstrap records an init node's own bootstrap, unless one is recorded, the node joined,
// or a cluster already answers at a peer (the init node was reset: it joins that one).
func (m *Manager) initBootstrap(ctx context.Context, o Options) {
	if found, where := m.clusterAtPeers(ctx, o); found {
		o.Log.Info("etcd: init node: a cluster answers at " + where + ": joining it")

		return
	}

	m.mu.Lock()
	defer m.mu.Unlock()

	if m.bootstrap == nil && m.taken == nil && !m.joined {
		o.Log.Info("etcd: init node: bootstrapping the cluster itself")

		m.bootstrap = &BootstrapOptions{}
	}
}

var errNoPeers = errors.New("no other control plane known")

// peerEndpoints are the client URLs of the other control planes.
func peerEndpoints(ctx context.Context, o Options) ([]string, error) {
	if o.Peers == nil {
		return nil, errNoPeers
	}

	addrs, err := o.Peers(ctx)
	if err != nil {
		return nil, fmt.Errorf("finding peers: %w", err)
	}

	var eps []string

	seen := map[string]bool{}

	for _, a := range addrs {
		h := hostOf(a)
		if h == "" || o.isSelf(h) || seen[h] {
			continue
		}

		seen[h] = true
		eps = append(eps, ClientURL(h, o.ClientPort))
	}

	if len(eps) == 0 {
		return nil, errNoPeers
	}

	return eps, nil
}

func sameHost(a, b string) bool {
	ia, ib := net.ParseIP(a), net.ParseIP(b)
	if ia != nil && ib != nil {
		return ia.Equal(ib)
	}

	return a == b
}

// reachable reports whether something listens at a client URL: a quick TCP connect, since the
// etcd client waits for a connection until its deadline.
func reachable(ctx context.Context, ep string) bool {
	u, err := url.Parse(ep)
	if err != nil {
		return false
	}

	d := net.Dialer{Timeout: time.Second}

	conn, err := d.DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return false
	}

	conn.Close()

	return true
}

// findVoter returns the first endpoint that answers as a voting member with a leader.
func (m *Manager) findVoter(ctx context.Context, o Options, eps []string) (string, error) {
	for _, ep := range eps {
		if !reachable(ctx, ep) {
			continue
		}

		cli, err := m.client(o, ep)
		if err != nil {
			return "", err
		}

		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := cli.Status(sctx, ep)

		cancel()
		cli.Close()

		if err == nil && !st.IsLearner && st.Leader != 0 {
			return ep, nil
		}
	}

	return "", fmt.Errorf("no etcd member answers at %s", strings.Join(eps, ","))
}

// clusterAtPeers reports whether any peer answers as an etcd member.
func (m *Manager) clusterAtPeers(ctx context.Context, o Options) (bool, string) {
	eps, err := peerEndpoints(ctx, o)
	if err != nil {
		return false, ""
	}

	for _, ep := range eps {
		if !reachable(ctx, ep) {
			continue
		}

		cli, err := m.client(o, ep)
		if err != nil {
			continue
		}

		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err = cli.Status(sctx, ep)

		cancel()
		cli.Close()

		if err == nil {
			return true, ep
		}
	}

	return false, ""
}

// join adds this node as a learner to a cluster found at the peers and returns the
// --initial-cluster value to start with.
func (m *Manager) join(ctx context.Context, o Options) (string, error) {
	eps, err := peerEndpoints(ctx, o)
	if err != nil {
		return "", err
	}

	m.setPhase(o.Log, "looking for an etcd cluster at "+strings.Join(eps, ","))

	ep, err := m.findVoter(ctx, o, eps)
	if err != nil {
		return "", err
	}

	// One endpoint, a voting member: learners refuse membership changes.
	cli, err := m.client(o, ep)
	if err != nil {
		return "", err
	}
	defer cli.Close()

	jctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()

	list, err := cli.MemberList(jctx)
	if err != nil {
		return "", fmt.Errorf("listing members at %s: %w", ep, err)
	}

	self := o.peerURLs()

	var id uint64

	members := list.Members

	for _, mem := range list.Members {
		if !slices.ContainsFunc(self, func(u string) bool { return contains(mem.PeerURLs, u) }) {
			continue
		}

		if mem.Name == "" && mem.IsLearner {
			// Added by an earlier attempt that never started: reuse it.
			id = mem.ID

			break
		}

		// A member with our address but we hold no data: it is a stale entry of a previous
		// life of this node. Replace it.
		o.Log.Info("etcd: removing stale member with this node's peer URL", zap.String("id", fmt.Sprintf("%x", mem.ID)))

		if _, err := cli.MemberRemove(jctx, mem.ID); err != nil {
			return "", fmt.Errorf("removing stale member %x: %w", mem.ID, err)
		}
	}

	if id == 0 {
		// Short: raft drops a second membership change proposed while one is pending (another
		// node joining at the same moment); a retry finds our entry if this one did land.
		actx, acancel := context.WithTimeout(jctx, 1500*time.Millisecond)
		resp, err := cli.MemberAddAsLearner(actx, self)

		acancel()

		if err != nil {
			return "", fmt.Errorf("adding this node as a learner: %w", err)
		}

		id = resp.Member.ID
		members = resp.Members

		// Another node may have been added meanwhile: etcd refuses to start unless the initial
		// cluster lists every member, so take the latest list.
		if l, err := cli.MemberList(jctx); err == nil {
			members = l.Members
		}
	}

	var parts []string

	for _, mem := range members {
		name := mem.Name
		if mem.ID == id {
			name = o.Name
		}

		for _, u := range mem.PeerURLs {
			parts = append(parts, name+"="+u)
		}
	}

	return strings.Join(parts, ","), nil
}

// initialCluster names this member alone, at each of its peer URLs (a new cluster).
func (o *Options) initialCluster() string {
	parts := make([]string, 0, 1)
	for _, u := range o.peerURLs() {
		parts = append(parts, o.Name+"="+u)
	}

	return strings.Join(parts, ",")
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}

	return false
}

// client makes an etcd client for machined with the node's client certificate.
func (m *Manager) client(o Options, endpoints ...string) (*clientv3.Client, error) {
	tlsCfg, err := CertPaths{Dir: o.SecretsDir}.ClientTLS()
	if err != nil {
		return nil, err
	}

	cli, err := clientv3.New(clientv3.Config{
		Endpoints:            endpoints,
		TLS:                  tlsCfg,
		DialTimeout:          3 * time.Second,
		DialKeepAliveTime:    5 * time.Second,
		DialKeepAliveTimeout: 5 * time.Second,
		Logger:               zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("creating etcd client: %w", err)
	}

	return cli, nil
}

// LocalClient is a client to this node's member only.
func (m *Manager) LocalClient() (*clientv3.Client, error) {
	o, err := m.opts()
	if err != nil {
		return nil, err
	}

	return m.client(o, o.clientURL())
}

// ClusterClient is a client to every member of the cluster (found from this node's member list,
// else from the peers).
func (m *Manager) ClusterClient(ctx context.Context) (*clientv3.Client, error) {
	o, err := m.opts()
	if err != nil {
		return nil, err
	}

	return m.clusterClient(ctx, o)
}

func (m *Manager) clusterClient(ctx context.Context, o Options) (*clientv3.Client, error) {
	eps := []string{o.clientURL()}

	if local, err := m.client(o, o.clientURL()); err == nil {
		lctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		list, err := local.MemberList(lctx, clientv3.WithSerializable())

		cancel()
		local.Close()

		if err == nil {
			for _, mem := range list.Members {
				for _, u := range mem.ClientURLs {
					if !contains(eps, u) {
						eps = append(eps, u)
					}
				}
			}
		}
	}

	if len(eps) == 1 {
		if peers, err := peerEndpoints(ctx, o); err == nil {
			eps = append(eps, peers...)
		}
	}

	return m.client(o, eps...)
}

// DefaultTimeout bounds API calls that come without a deadline: the etcd client otherwise
// waits for a member to answer forever.
const DefaultTimeout = 15 * time.Second

func bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}

	return context.WithTimeout(ctx, DefaultTimeout)
}

// SnapshotPathOrDefault is where an uploaded recovery snapshot is kept.
func (o Options) SnapshotPathOrDefault() string {
	o.defaults()

	return o.SnapshotPath
}
