// Package discovery lets the nodes of a cluster find each other without an outside service:
// control planes keep a registry of affiliates (served by trustd beside certificate signing,
// behind the same cluster token), and every node exchanges its own affiliate for the list.
//
// The wire form is a hand-declared gRPC method whose request and reply are common.Data
// carrying JSON, so no generated code is needed.
package discovery

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Affiliate is what a node says about itself.
type Affiliate struct {
	NodeID          string   `json:"nodeId"`
	Hostname        string   `json:"hostname"`
	MachineType     string   `json:"machineType"`
	OperatingSystem string   `json:"operatingSystem"`
	Addresses       []string `json:"addresses"`
	// KubeSpan is the node's KubeSpan peer, when it runs KubeSpan.
	KubeSpan *KubeSpan `json:"kubespan,omitempty"`
	// Observed are the endpoints (ip:port) this node's KubeSpan reached other nodes at, by their
	// node ID (harvestExtraEndpoints): the registry adds them to those nodes' endpoints, so
	// that the others try what worked (an address behind NAT, say).
	Observed map[string][]string `json:"observed,omitempty"`
}

// KubeSpan is how the other nodes reach a node through KubeSpan: its WireGuard public key,
// its address in the KubeSpan network, and where its WireGuard listens (ip:port).
type KubeSpan struct {
	PublicKey           string   `json:"publicKey"`
	Address             string   `json:"address"`
	AdditionalAddresses []string `json:"additionalAddresses,omitempty"`
	Endpoints           []string `json:"endpoints"`
}

// TTL is how long an affiliate stays listed without a new exchange.
const TTL = 30 * time.Second

// Registry holds the affiliates of one cluster.
type Registry struct {
	mu  sync.Mutex
	m   map[string]entry
	Now func() time.Time // for tests
}

type entry struct {
	a    Affiliate
	seen time.Time
}

func (r *Registry) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}

	return time.Now()
}

// Exchange records a and returns every live affiliate, sorted by hostname.
func (r *Registry) Exchange(a Affiliate) []Affiliate {
	r.mu.Lock()
	defer r.mu.Unlock()

	if r.m == nil {
		r.m = map[string]entry{}
	}

	now := r.now()
	r.m[a.NodeID] = entry{a: a, seen: now}

	out := make([]Affiliate, 0, len(r.m))

	for id, e := range r.m {
		if now.Sub(e.seen) > TTL {
			delete(r.m, id)
			continue
		}

		out = append(out, e.a)
	}

	// The endpoints the live affiliates observed, added to the observed ones' (copies: the
	// stored entries stay as their nodes sent them).
	observed := map[string][]string{}

	for _, reporter := range out {
		for id, eps := range reporter.Observed {
			if id != reporter.NodeID {
				observed[id] = append(observed[id], eps...)
			}
		}
	}

	for i, a := range out {
		out[i].Observed = nil

		if a.KubeSpan == nil || len(observed[a.NodeID]) == 0 {
			continue
		}

		ks := *a.KubeSpan
		ks.Endpoints = slices.Clone(ks.Endpoints)

		for _, ep := range observed[a.NodeID] {
			if !slices.Contains(ks.Endpoints, ep) {
				ks.Endpoints = append(ks.Endpoints, ep)
			}
		}

		out[i].KubeSpan = &ks
	}

	slices.SortFunc(out, func(x, y Affiliate) int {
		if x.Hostname != y.Hostname {
			if x.Hostname < y.Hostname {
				return -1
			}

			return 1
		}

		if x.NodeID < y.NodeID {
			return -1
		}

		return 1
	})

	return out
}

// FullMethod is the gRPC method of an exchange.
const FullMethod = "/talosgo.discovery.Registry/Exchange"

// Register adds the registry to a gRPC server; authorize checks each call (the cluster token).
func Register(srv *grpc.Server, reg *Registry, authorize func(ctx context.Context) error) {
	srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: "talosgo.discovery.Registry",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Exchange",
			Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
				if err := authorize(ctx); err != nil {
					if _, ok := status.FromError(err); ok {
						return nil, err // the authorizer chose the code (PermissionDenied, ResourceExhausted)
					}

					return nil, status.Error(codes.PermissionDenied, "discovery: not authorized: the cluster token is missing or wrong")
				}

				var in common.Data
				if err := dec(&in); err != nil {
					return nil, err
				}

				var a Affiliate
				if err := json.Unmarshal(in.Bytes, &a); err != nil || a.NodeID == "" {
					return nil, status.Error(codes.InvalidArgument, "discovery: affiliate must be JSON with a nodeId")
				}

				out, err := json.Marshal(reg.Exchange(a))
				if err != nil {
					return nil, status.Errorf(codes.Internal, "discovery: %v", err)
				}

				return &common.Data{Bytes: out}, nil
			},
		}},
	}, struct{}{})
}

// Exchange sends a to the registry behind conn and returns the affiliates it knows.
func Exchange(ctx context.Context, conn grpc.ClientConnInterface, a Affiliate) ([]Affiliate, error) {
	in, err := json.Marshal(a)
	if err != nil {
		return nil, err
	}

	var out common.Data
	if err = conn.Invoke(ctx, FullMethod, &common.Data{Bytes: in}, &out); err != nil {
		return nil, err
	}

	var list []Affiliate
	if err = json.Unmarshal(out.Bytes, &list); err != nil {
		return nil, fmt.Errorf("discovery: bad reply: %w", err)
	}

	return list, nil
}
