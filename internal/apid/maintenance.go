package apid

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	cosiapi "github.com/cosi-project/runtime/api/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/talos-go/talos/internal/connlimit"
	"github.com/talos-go/talos/internal/pki"
)

// MaintenanceOptions configure the maintenance API.
type MaintenanceOptions struct {
	// Listen is the node address and port 50000.
	Listen string
	// MachinedSocket is the local machined's API socket.
	MachinedSocket string
	// Log receives the server's log.
	Log *zap.Logger
}

// maintenanceMethods are the only calls served before the node has a config, with the role
// each is forwarded to machined with.
var maintenanceMethods = map[string]role.Role{
	"/machine.MachineService/ApplyConfiguration":    role.Admin,
	"/machine.MachineService/Version":               role.Reader,
	"/machine.MachineService/GenerateConfiguration": role.Admin,
	// machined answers these as on any node: a node with no A/B slots (container mode) or
	// nothing installed refuses them with FailedPrecondition.
	"/machine.MachineService/Upgrade": role.Admin,
	"/machine.MachineService/Reset":   role.Admin,
	// Upstream's too: META keys (a network config for the next boot, say) before a config.
	"/machine.MachineService/MetaWrite":  role.Admin,
	"/machine.MachineService/MetaDelete": role.Admin,
	// A metal node's disks before its install (`talosctl wipe disk -i`).
	"/storage.StorageService/BlockDeviceWipe": role.Admin,
	"/cosi.resource.State/Get":                role.Reader,
	"/cosi.resource.State/List":               role.Reader,
	"/cosi.resource.State/Watch":              role.Reader,
}

// maintenanceResource reports whether a resource may be read in maintenance mode: hardware,
// disks (block) and network resources only, and the resource definitions (namespace meta) a
// client needs to name them.
func maintenanceResource(namespace, typ string) bool {
	switch {
	case namespace == "hardware", namespace == "network", namespace == "meta":
		return true
	case namespace == runtimeres.NamespaceName && typ == runtimeres.MetaKeyType:
		return true
	case strings.HasSuffix(typ, ".block.talos.dev"):
		return true
	default:
		return false
	}
}

// ServeMaintenance serves the maintenance API until ctx ends: TLS with a self-signed server
// certificate and no client certificate, offering ApplyConfiguration, Version and reads of
// hardware, disk and network resources, forwarded to machined. When ctx ends, calls in flight
// (the ApplyConfiguration that ended maintenance mode) get a few seconds to finish and the
// port is released before it returns. machined runs it while it waits for a config.
func ServeMaintenance(ctx context.Context, opts MaintenanceOptions) error {
	log := opts.Log
	if log == nil {
		log = zap.NewNop()
	}

	host, _, err := net.SplitHostPort(opts.Listen)
	if err != nil {
		return fmt.Errorf("maintenance listen address %q: %w", opts.Listen, err)
	}

	cert, err := selfSigned(host)
	if err != nil {
		return fmt.Errorf("maintenance certificate: %w", err)
	}

	local, err := dialLocal(opts.MachinedSocket)
	if err != nil {
		return err
	}
	defer local.Close()

	// Anyone who reaches the port may call: the limits of an unauthenticated listener, with
	// no maximum age (a resource watch may last as long as the node waits for its config).
	srv := grpc.NewServer(append(connlimit.ServerOptions(constants.GRPCMaxMessageSize, 0),
		grpc.Creds(credentials.NewTLS(&tls.Config{
			MinVersion:   tls.VersionTLS13,
			Certificates: []tls.Certificate{cert},
			ClientAuth:   tls.NoClientCert,
		})),
		grpc.ForceServerCodecV2(rawCodec{}),
		grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
			return maintenanceHandle(stream, local, host)
		}),
	)...)

	tl, err := listenRetry(ctx, opts.Listen)
	if err != nil {
		return err
	}

	l := connlimit.PerSource(tl, connlimit.MaxPerSource)

	served := make(chan error, 1)

	go func() { served <- srv.Serve(l) }()

	log.Info("maintenance API serving", zap.String("address", opts.Listen))

	select {
	case err = <-served:
		return err
	case <-ctx.Done():
	}

	stopped := make(chan struct{})

	go func() {
		srv.GracefulStop()
		close(stopped)
	}()

	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		srv.Stop()
		<-stopped
	}

	_ = <-served // Serve's error after a stop we asked for says nothing new

	return nil
}

func maintenanceHandle(stream grpc.ServerStream, local *grpc.ClientConn, host string) error {
	method, _ := grpc.MethodFromServerStream(stream)

	if method == "/machine.MachineService/GenerateClientConfiguration" {
		return status.Error(codes.Unimplemented, "client configuration (talosconfig) can't be generated in maintenance mode: apply a config first")
	}

	r, ok := maintenanceMethods[method]
	if !ok {
		return status.Errorf(codes.Unimplemented, "method %s is not available in maintenance mode: apply a config first", method)
	}

	md, _ := metadata.FromIncomingContext(stream.Context())
	list, _, err := targets(md)
	if err != nil {
		return err
	}

	if len(list) > 0 {
		for _, t := range list {
			if t != host {
				return status.Errorf(codes.InvalidArgument, "maintenance mode serves only this node, not %s", t)
			}
		}
	}

	info := lookupMethod(method)

	var first frame

	if err := stream.RecvMsg(&first); err != nil {
		return err
	}

	if err := maintenanceRequestCheck(method, first.payload); err != nil {
		return err
	}

	if strings.HasPrefix(method, "/cosi.resource.State/") {
		ns, typ, err := cosiTarget(method, first.payload)
		if err != nil {
			return err
		}

		if !maintenanceResource(ns, typ) {
			return status.Errorf(codes.PermissionDenied, "resource %s in namespace %s is not readable in maintenance mode: only hardware, disk and network resources are", typ, ns)
		}
	}

	return oneToOne(&replayStream{ServerStream: stream, first: &first}, local, method, info, forwardMD(md, role.MakeSet(r)))
}

// maintenanceRequestCheck refuses what maintenance mode does not do, as upstream's: apply
// modes that keep a running config (no-reboot, staged), and the upgrade and reset options that
// act on a cluster or on single partitions.
func maintenanceRequestCheck(method string, payload []byte) error {
	switch method {
	case "/machine.MachineService/ApplyConfiguration":
		var req machine.ApplyConfigurationRequest
		if err := proto.Unmarshal(payload, &req); err != nil {
			return status.Errorf(codes.InvalidArgument, "decoding request: %v", err)
		}

		switch req.GetMode() {
		case machine.ApplyConfigurationRequest_AUTO, machine.ApplyConfigurationRequest_REBOOT, machine.ApplyConfigurationRequest_TRY:
		default:
			return status.Errorf(codes.Unimplemented, "apply configuration --mode=%s is not supported in maintenance mode: the node has no config to keep running; use --mode=auto",
				strings.ReplaceAll(strings.ToLower(req.GetMode().String()), "_", "-"))
		}
	case "/machine.MachineService/Upgrade":
		var req machine.UpgradeRequest
		if err := proto.Unmarshal(payload, &req); err != nil {
			return status.Errorf(codes.InvalidArgument, "decoding request: %v", err)
		}

		if req.GetPreserve() || req.GetStage() || req.GetForce() {
			return status.Error(codes.Unimplemented, "upgrade --preserve, --stage and --force are not supported in maintenance mode: the node has no data to keep and no cluster to guard")
		}
	case "/machine.MachineService/Reset":
		var req machine.ResetRequest
		if err := proto.Unmarshal(payload, &req); err != nil {
			return status.Errorf(codes.InvalidArgument, "decoding request: %v", err)
		}

		if len(req.GetSystemPartitionsToWipe()) > 0 {
			return status.Error(codes.InvalidArgument, "system_partitions_to_wipe is not supported in maintenance mode: drop --system-labels-to-wipe, the whole system is reset")
		}
	}

	return nil
}

// replayStream hands out an already received first message before reading the stream.
type replayStream struct {
	grpc.ServerStream

	first *frame
}

func (r *replayStream) RecvMsg(m any) error {
	if r.first != nil {
		f, ok := m.(*frame)
		if !ok {
			return errors.New("replay stream: unexpected message type")
		}

		*f, r.first = *r.first, nil

		return nil
	}

	return r.ServerStream.RecvMsg(m)
}

// selfSigned makes an in-memory server certificate for the maintenance API.
func selfSigned(host string) (tls.Certificate, error) {
	leaf := pki.Leaf{CommonName: "maintenance", ExtKeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, Lifetime: 24 * time.Hour}

	if ip := net.ParseIP(host); ip != nil {
		leaf.IPs = []net.IP{ip}
	} else if host != "" {
		leaf.DNSNames = []string{host}
	}

	return pki.SelfSigned(leaf, time.Now())
}

// listenRetry listens on addr, retrying for a while when the port is still held (the
// maintenance API and apid hand the port over to each other).
func listenRetry(ctx context.Context, addr string) (net.Listener, error) {
	deadline := time.Now().Add(15 * time.Second)

	for {
		l, err := net.Listen("tcp", addr)
		if err == nil {
			return l, nil
		}

		if time.Now().After(deadline) {
			return nil, fmt.Errorf("listening on %s: %w", addr, err)
		}

		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// cosiTarget decodes the namespace and type of a COSI read request.
func cosiTarget(method string, payload []byte) (ns, typ string, err error) {
	var req interface {
		proto.Message
		GetNamespace() string
		GetType() string
	}

	switch method {
	case "/cosi.resource.State/Get":
		req = &cosiapi.GetRequest{}
	case "/cosi.resource.State/List":
		req = &cosiapi.ListRequest{}
	case "/cosi.resource.State/Watch":
		req = &cosiapi.WatchRequest{}
	default:
		return "", "", status.Errorf(codes.Internal, "%s is not a COSI read", method)
	}

	if err = proto.Unmarshal(payload, req); err != nil {
		return "", "", status.Errorf(codes.InvalidArgument, "decoding request: %v", err)
	}

	return req.GetNamespace(), req.GetType(), nil
}
