// Package apid is the node's API gateway: it terminates mutual TLS on the node address,
// authorizes each call by the roles in the client certificate, and routes it to the local
// machined, to one other node's apid, or to many nodes at once, merging their replies.
//
// The listener is a frame-level HTTP/2 relay (package h2relay). Its route decides each new
// stream's roles from the client certificate; direct (route.go), the whole routing policy,
// decides from the method, the roles and the "node"/"nodes" metadata where the call goes.
// Calls for this node go to machined frame by frame; the rest go to the router, an
// in-process gRPC server (proxy.go) reached over socket pairs, which trusts the roles the
// relay put in the metadata and asks direct again. docs/request-path.md walks a call through.
//
// apid reads only its certificate folder (package certs: ca.crt, server.crt/key,
// client.crt/key, reloaded when they change) and reaches machined only through its socket.
// Before a node has a config, machined runs ServeMaintenance on the same port instead.
//
// Benchmarks (ratios printed by each run):
//
//	go test -run XXX -bench . ./internal/apid/      # fake machined: apid vs socket, fan-out 1/10/50
//	go test -run XXX -bench . ./internal/apid/e2e/  # real machined processes
package apid

import (
	"context"
	"errors"
	"fmt"
	"net"
	goruntime "runtime"
	"strings"
	"sync"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"

	"github.com/talos-go/talos/internal/apid/certs"
	"github.com/talos-go/talos/internal/apid/h2relay"
	"github.com/talos-go/talos/internal/unixsock"
)

// Metadata keys of the Talos API.
const (
	mdNode  = "node"  // proxy one-to-one to this node
	mdNodes = "nodes" // fan out to these nodes
	mdRole  = constants.APIAuthzRoleMetadataKey
)

// windowSize is the static HTTP/2 flow-control window of apid's connections.
const windowSize = 4 << 20

// maxHeaderList bounds a request's header list (HTTP/2 SETTINGS_MAX_HEADER_LIST_SIZE) at the
// relay and at the router: room for every "nodes" entry direct allows with long hostnames,
// far below grpc's 16 MiB. Messages are bounded by constants.GRPCMaxMessageSize (32 MiB, as
// upstream's clients) at every hop that decodes them: the router, its connections to machined
// and to other nodes, machined's own server.
const maxHeaderList = 1 << 20

// Options configure a Server.
type Options struct {
	// Certs is the certificate store (server, client and CA).
	Certs *certs.Store
	// MachinedSocket is the local machined's API socket.
	MachinedSocket string
	// LocalAddresses are targets that mean this node (its addresses and hostname): calls for
	// them go straight to machined instead of through this node's own listener.
	LocalAddresses []string
	// RemotePort is other nodes' apid port when a target names no port (default 50000).
	RemotePort int
	// DialTimeout bounds one connection attempt to another node (default 5s).
	DialTimeout time.Duration
	// Log receives the server's log; never keys.
	Log *zap.Logger
}

// Server is one apid.
type Server struct {
	opts  Options
	log   *zap.Logger
	relay *h2relay.Server // the listener side: mTLS, roles, local calls frame by frame
	grpc  *grpc.Server    // the router: calls for other nodes, fan-out, inspected reads
	pipes *pipeListener   // the relay's connections to the router
	local *grpc.ClientConn
	pool  *pool
	// canForward reports whether this node holds a client certificate (a control plane): only
	// then does it forward calls to other nodes.
	canForward func() bool

	serveRouter sync.Once
	routerDone  chan struct{}

	// Fan-out workers: long-lived goroutines keep their grown stacks between calls.
	work    chan func()
	quit    chan struct{}
	workers sync.WaitGroup
}

// fanOutWorkers is how many goroutines wait for per-node fan-out work.
const fanOutWorkers = 64

// spawn runs fn on an idle worker, or on a new goroutine when all are busy; wg tracks it.
func (s *Server) spawn(wg *sync.WaitGroup, fn func()) {
	wg.Add(1)

	task := func() {
		defer wg.Done()

		fn()
	}

	select {
	case s.work <- task:
	default:
		go task()
	}
}

func (s *Server) worker() {
	defer s.workers.Done()

	for {
		select {
		case task := <-s.work:
			task()
		case <-s.quit:
			return
		}
	}
}

// New builds a server; Serve starts it.
func New(opts Options) (*Server, error) {
	if opts.Certs == nil {
		return nil, errors.New("apid: no certificate store")
	}

	if opts.RemotePort == 0 {
		opts.RemotePort = constants.ApidPort
	}

	if opts.DialTimeout == 0 {
		opts.DialTimeout = 5 * time.Second
	}

	if opts.Log == nil {
		opts.Log = zap.NewNop()
	}

	local, err := dialLocal(opts.MachinedSocket)
	if err != nil {
		return nil, err
	}

	s := &Server{
		opts:       opts,
		log:        opts.Log,
		local:      local,
		pipes:      newPipeListener(),
		routerDone: make(chan struct{}),
		pool:       newPool(credentials.NewTLS(opts.Certs.ClientTLS()), opts.DialTimeout),
		canForward: opts.Certs.CanForward,
		work:       make(chan func()),
		quit:       make(chan struct{}),
	}

	s.workers.Add(fanOutWorkers)

	for range fanOutWorkers {
		go s.worker()
	}

	s.relay = &h2relay.Server{
		TLS: opts.Certs.ServerTLS(),
		Backends: []h2relay.Dialer{
			backendMachined: func(ctx context.Context) (net.Conn, error) { return unixsock.Dial(ctx, opts.MachinedSocket) },
			backendRouter:   s.pipes.Dial,
		},
		Route:             s.route,
		Window:            windowSize,
		MaxHeaderListSize: maxHeaderList,
		Log:               opts.Log,
	}

	s.grpc = grpc.NewServer(
		grpc.ForceServerCodecV2(rawCodec{}),
		grpc.MaxRecvMsgSize(constants.GRPCMaxMessageSize),
		grpc.MaxSendMsgSize(constants.GRPCMaxMessageSize),
		grpc.MaxHeaderListSize(2*maxHeaderList), // room for the roles the relay adds
		// Static flow-control windows turn off BDP probing, which costs a ping round per call.
		grpc.InitialWindowSize(windowSize),
		grpc.InitialConnWindowSize(windowSize),
		grpc.UnknownServiceHandler(s.handle),
		// Reuse handler goroutines (and their grown stacks) instead of one new goroutine per call.
		grpc.NumStreamWorkers(uint32(goruntime.GOMAXPROCS(0))),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	)

	return s, nil
}

// dialLocal opens the (lazy) connection to machined's socket.
func dialLocal(socket string) (*grpc.ClientConn, error) {
	conn, err := grpc.NewClient("unix://"+socket,
		grpc.WithContextDialer(unixsock.GRPCDialer), // state folders can be deep
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodec{}),
			grpc.MaxCallRecvMsgSize(constants.GRPCMaxMessageSize), grpc.MaxCallSendMsgSize(constants.GRPCMaxMessageSize)),
		grpc.WithInitialWindowSize(windowSize),
		grpc.WithInitialConnWindowSize(windowSize),
		// machined may restart; a call must not wait for it longer than its own deadline.
		grpc.WithConnectParams(fastReconnect(2*time.Second)),
	)
	if err != nil {
		return nil, fmt.Errorf("dialing machined at %s: %w", socket, err)
	}

	return conn, nil
}

// Serve serves l until Stop.
func (s *Server) Serve(l net.Listener) error {
	s.serveRouter.Do(func() {
		go func() {
			defer close(s.routerDone)

			s.grpc.Serve(s.pipes) //nolint:errcheck // returns when Stop closes the listener
		}()
	})

	return s.relay.Serve(l)
}

// Stop drains calls for up to timeout, then closes everything.
func (s *Server) Stop(timeout time.Duration) {
	deadline := time.Now().Add(timeout)

	s.relay.Stop(timeout)
	s.pipes.Close()

	done := make(chan struct{})

	go func() {
		s.grpc.GracefulStop()
		close(done)
	}()

	select {
	case <-done:
	case <-time.After(time.Until(deadline)):
		s.grpc.Stop()
		<-done
	}

	s.serveRouter.Do(func() { close(s.routerDone) })
	<-s.routerDone

	close(s.quit)
	s.workers.Wait()

	s.pool.close()
	s.local.Close()
}

// forwardMD is the metadata sent on: the caller's metadata without routing, transport and
// role keys, plus the caller's effective roles.
func forwardMD(in metadata.MD, roles role.Set) metadata.MD {
	out := make(metadata.MD, len(in)+1)

	for k, v := range in {
		switch k {
		case mdNode, mdNodes, mdRole, ":authority", "content-type", "user-agent", "te", "grpc-accept-encoding", "grpc-encoding":
			continue
		}

		out[k] = v
	}

	out[mdRole] = roles.Strings()

	return out
}

// conn returns the connection for a target, and what to call when the call ends: machined for
// this node, the pooled connection to the node's apid otherwise. The error is a gRPC status.
func (s *Server) conn(target string) (*grpc.ClientConn, func(), error) {
	if s.isLocal(target) {
		return s.local, func() {}, nil
	}

	// direct checked the target: a host, or a host on the remote port.
	addr := target
	if _, _, err := net.SplitHostPort(target); err != nil {
		addr = net.JoinHostPort(strings.Trim(target, "[]"), fmt.Sprint(s.opts.RemotePort))
	}

	return s.pool.get(addr)
}
