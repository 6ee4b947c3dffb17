package discoveryservice

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/siderolabs/discovery-api/api/v1alpha1/server/pb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

var _ pb.ClusterServer = (*clusterServer)(nil)

// clusterServer is the gRPC face of the Service: it validates, rate limits, and chooses the
// codes; the store knows nothing of gRPC.
type clusterServer struct {
	pb.UnimplementedClusterServer

	s *Service
}

// admit counts the request and applies the per-source-IP rate limit.
func (srv *clusterServer) admit(ctx context.Context, method string) error {
	srv.s.metrics.requests.WithLabelValues(method).Inc()

	if ip := peerIP(ctx); ip.IsValid() && !srv.s.limiter.allow(ip) {
		return srv.reject("rate", codes.ResourceExhausted,
			fmt.Sprintf("rate limit of %g requests per second (burst %d) per source address exceeded",
				srv.s.limits.RequestsPerSecond, srv.s.limits.Burst))
	}

	return nil
}

func (srv *clusterServer) reject(reason string, code codes.Code, msg string) error {
	srv.s.metrics.rejections.WithLabelValues(reason).Inc()

	return status.Error(code, msg)
}

// Hello reports the client's address as this server sees it (the gRPC peer: the service is
// meant to be reached directly, so no proxy header is trusted) and never redirects.
func (srv *clusterServer) Hello(ctx context.Context, req *pb.HelloRequest) (*pb.HelloResponse, error) {
	if err := srv.admit(ctx, "Hello"); err != nil {
		return nil, err
	}

	if err := srv.validateClusterID(req.GetClusterId()); err != nil {
		return nil, err
	}

	resp := &pb.HelloResponse{}
	if ip := peerIP(ctx); ip.IsValid() {
		resp.ClientIp = ip.AsSlice()
	}

	return resp, nil
}

func (srv *clusterServer) AffiliateUpdate(ctx context.Context, req *pb.AffiliateUpdateRequest) (*pb.AffiliateUpdateResponse, error) {
	if err := srv.admit(ctx, "AffiliateUpdate"); err != nil {
		return nil, err
	}

	if err := srv.validateClusterID(req.GetClusterId()); err != nil {
		return nil, err
	}

	if err := srv.validateAffiliateID(req.GetAffiliateId()); err != nil {
		return nil, err
	}

	l := srv.s.limits

	if len(req.GetAffiliateData()) > l.AffiliateDataMax {
		return nil, srv.reject("invalid", codes.InvalidArgument,
			fmt.Sprintf("affiliate_data is %d bytes, over the limit of %d", len(req.GetAffiliateData()), l.AffiliateDataMax))
	}

	for i, e := range req.GetAffiliateEndpoints() {
		if len(e) > l.EndpointMax {
			return nil, srv.reject("invalid", codes.InvalidArgument,
				fmt.Sprintf("affiliate_endpoints[%d] is %d bytes, over the limit of %d", i, len(e), l.EndpointMax))
		}
	}

	// As upstream, a TTL over the limit is refused rather than cut: the client would otherwise
	// refresh too late and see its affiliate vanish.
	ttl := req.GetTtl().AsDuration()
	if ttl <= 0 || ttl > l.TTLMax {
		return nil, srv.reject("invalid", codes.InvalidArgument,
			fmt.Sprintf("ttl %s is out of range: it must be over 0 and at most %s", ttl, l.TTLMax))
	}

	err := srv.s.store.update(req.GetClusterId(), req.GetAffiliateId(), req.AffiliateData, req.GetAffiliateEndpoints(),
		srv.s.now().Add(ttl))

	switch {
	case errors.Is(err, errTooManyClusters):
		return nil, srv.reject("clusters", codes.ResourceExhausted,
			fmt.Sprintf("%s: the server holds its limit of %d clusters", err, l.Clusters))
	case errors.Is(err, errTooManyAffiliates):
		return nil, srv.reject("affiliates", codes.ResourceExhausted,
			fmt.Sprintf("%s: the limit is %d affiliates per cluster", err, l.AffiliatesPerCluster))
	case errors.Is(err, errTooManyEndpoints):
		return nil, srv.reject("endpoints", codes.ResourceExhausted,
			fmt.Sprintf("%s: the limit is %d endpoints per affiliate", err, l.EndpointsPerAffiliate))
	case err != nil:
		return nil, status.Error(codes.Internal, err.Error())
	}

	return &pb.AffiliateUpdateResponse{}, nil
}

func (srv *clusterServer) AffiliateDelete(ctx context.Context, req *pb.AffiliateDeleteRequest) (*pb.AffiliateDeleteResponse, error) {
	if err := srv.admit(ctx, "AffiliateDelete"); err != nil {
		return nil, err
	}

	if err := srv.validateClusterID(req.GetClusterId()); err != nil {
		return nil, err
	}

	if err := srv.validateAffiliateID(req.GetAffiliateId()); err != nil {
		return nil, err
	}

	srv.s.store.remove(req.GetClusterId(), req.GetAffiliateId())

	return &pb.AffiliateDeleteResponse{}, nil
}

func (srv *clusterServer) List(ctx context.Context, req *pb.ListRequest) (*pb.ListResponse, error) {
	if err := srv.admit(ctx, "List"); err != nil {
		return nil, err
	}

	if err := srv.validateClusterID(req.GetClusterId()); err != nil {
		return nil, err
	}

	resp := &pb.ListResponse{}
	for _, ch := range srv.s.store.list(req.GetClusterId(), srv.s.now()) {
		resp.Affiliates = append(resp.Affiliates, ch.affiliate())
	}

	return resp, nil
}

// Watch sends the live affiliates first (one message, possibly empty), then each change as
// its own message; a deletion carries only the affiliate ID with deleted set.
func (srv *clusterServer) Watch(req *pb.WatchRequest, stream grpc.ServerStreamingServer[pb.WatchResponse]) error {
	ctx := stream.Context()

	if err := srv.admit(ctx, "Watch"); err != nil {
		return err
	}

	if err := srv.validateClusterID(req.GetClusterId()); err != nil {
		return err
	}

	snapshot, sub := srv.s.store.subscribe(req.GetClusterId(), srv.s.now())
	defer srv.s.store.unsubscribe(req.GetClusterId(), sub)

	first := &pb.WatchResponse{}
	for _, ch := range snapshot {
		first.Affiliates = append(first.Affiliates, ch.affiliate())
	}

	if err := stream.Send(first); err != nil {
		return err
	}

	for {
		select {
		case <-ctx.Done():
			return nil
		case <-srv.s.stopping:
			return status.Error(codes.Unavailable, "the discovery service is shutting down")
		case <-sub.lost:
			return srv.reject("lagging", codes.Aborted,
				fmt.Sprintf("watcher fell more than %d changes behind; watch again", subscriptionBuffer))
		case ch := <-sub.ch:
			if err := stream.Send(&pb.WatchResponse{Affiliates: []*pb.Affiliate{ch.affiliate()}, Deleted: ch.deleted}); err != nil {
				return err
			}
		}
	}
}

func (srv *clusterServer) validateClusterID(id string) error {
	return srv.validateID("cluster_id", id, srv.s.limits.ClusterIDMax)
}

func (srv *clusterServer) validateAffiliateID(id string) error {
	return srv.validateID("affiliate_id", id, srv.s.limits.AffiliateIDMax)
}

func (srv *clusterServer) validateID(field, id string, maxLen int) error {
	switch {
	case id == "":
		return srv.reject("invalid", codes.InvalidArgument, field+" is empty: set it")
	case len(id) > maxLen:
		return srv.reject("invalid", codes.InvalidArgument,
			fmt.Sprintf("%s is %d bytes, over the limit of %d", field, len(id), maxLen))
	}

	return nil
}

func (ch change) affiliate() *pb.Affiliate {
	if ch.deleted {
		return &pb.Affiliate{Id: ch.id}
	}

	return &pb.Affiliate{Id: ch.id, Data: ch.data, Endpoints: ch.endpoints}
}

// peerIP is the address of the connection's other end, IPv4 unmapped (so an IPv4 client is
// told its 4-byte address, and one limiter covers it whichever way it connected).
func peerIP(ctx context.Context) netip.Addr {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return netip.Addr{}
	}

	if tcp, ok := p.Addr.(*net.TCPAddr); ok {
		ip, _ := netip.AddrFromSlice(tcp.IP)

		return ip.Unmap()
	}

	ap, err := netip.ParseAddrPort(p.Addr.String())
	if err != nil {
		return netip.Addr{}
	}

	return ap.Addr().Unmap()
}
