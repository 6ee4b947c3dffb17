package server

import (
	"context"
	"net/url"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	machinetype "github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// GenerateConfiguration generates a machine config and a talosconfig, as upstream's: with this
// node's cluster secrets when it has a config (a config to join its cluster), else with new
// ones (maintenance mode), where only a control plane config can be made: a worker's would
// name a cluster that does not exist.
func (s *Machine) GenerateConfiguration(ctx context.Context, req *machine.GenerateConfigurationRequest) (*machine.GenerateConfigurationResponse, error) {
	cluster, mc := req.GetClusterConfig(), req.GetMachineConfig()
	if cluster.GetControlPlane().GetEndpoint() == "" || mc == nil {
		return nil, status.Error(codes.InvalidArgument, "cluster_config.control_plane.endpoint and machine_config are required")
	}

	if v := req.GetConfigVersion(); v != "" && v != "v1alpha1" {
		return nil, status.Errorf(codes.InvalidArgument, "config_version %q: the only machine config version is v1alpha1", v)
	}

	u, err := url.Parse(cluster.GetControlPlane().GetEndpoint())
	if err != nil || u.Hostname() == "" {
		return nil, status.Errorf(codes.InvalidArgument, "cluster_config.control_plane.endpoint %q is not a URL: give it as https://<address>:6443", cluster.GetControlPlane().GetEndpoint())
	}

	typ := machinetype.Type(mc.GetType())
	if typ == machinetype.TypeUnknown || typ > machinetype.TypeWorker {
		return nil, status.Errorf(codes.InvalidArgument, "machine_config.type %v: choose init, control plane or worker", mc.GetType())
	}

	clock := secrets.NewClock()
	if t := req.GetOverrideTime(); t != nil {
		clock = secrets.NewFixedClock(t.AsTime())
	}

	var bundle *secrets.Bundle

	if cfg := s.R.Config(); cfg != nil {
		bundle = secrets.NewBundleFromConfig(clock, cfg)
	} else {
		if typ == machinetype.TypeWorker {
			return nil, status.Error(codes.FailedPrecondition, "a worker config joins an existing cluster, and a node in maintenance mode has no cluster secrets: generate a control plane config here, or ask a node that has a config")
		}

		if bundle, err = secrets.NewBundle(clock, nil); err != nil {
			return nil, status.Errorf(codes.Internal, "generating secrets: %v", err)
		}
	}

	in, err := generate.NewInput(cluster.GetName(), cluster.GetControlPlane().GetEndpoint(), mc.GetKubernetesVersion(), generateOptions(req, bundle)...)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "%v", err)
	}

	cfg, err := in.Config(typ)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "generating the %s config: %v", typ, err)
	}

	data, err := cfg.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
	if err != nil {
		return nil, status.Errorf(codes.Internal, "encoding the config: %v", err)
	}

	tc, err := in.Talosconfig()
	if err != nil {
		return nil, status.Errorf(codes.Internal, "generating the talosconfig: %v", err)
	}

	// The talosconfig reaches the cluster where its endpoint is.
	tc.Contexts[tc.Context].Endpoints = []string{u.Hostname()}

	tcData, err := tc.Bytes()
	if err != nil {
		return nil, status.Errorf(codes.Internal, "encoding the talosconfig: %v", err)
	}

	return &machine.GenerateConfigurationResponse{Messages: []*machine.GenerateConfiguration{{
		Metadata: s.metadata(ctx), Data: [][]byte{data}, Talosconfig: tcData,
	}}}, nil
}

// generateOptions are the request's optional settings as generation options.
func generateOptions(req *machine.GenerateConfigurationRequest, bundle *secrets.Bundle) []generate.Option {
	cluster, mc := req.GetClusterConfig(), req.GetMachineConfig()

	opts := []generate.Option{
		generate.WithSecretsBundle(bundle),
		generate.WithAllowSchedulingOnControlPlanes(cluster.GetAllowSchedulingOnControlPlanes()),
	}

	if disk := mc.GetInstallConfig().GetInstallDisk(); disk != "" {
		opts = append(opts, generate.WithInstallDisk(disk))
	}

	if image := mc.GetInstallConfig().GetInstallImage(); image != "" {
		opts = append(opts, generate.WithInstallImage(image))
	}

	if domain := cluster.GetClusterNetwork().GetDnsDomain(); domain != "" {
		opts = append(opts, generate.WithDNSDomain(domain))
	}

	if cni := cluster.GetClusterNetwork().GetCniConfig(); cni != nil {
		opts = append(opts, generate.WithClusterCNIConfig(&v1alpha1.CNIConfig{CNIName: cni.GetName(), CNIUrls: cni.GetUrls()}))
	}

	if nc := mc.GetNetworkConfig(); nc != nil {
		network := &v1alpha1.NetworkConfig{NetworkHostname: nc.GetHostname()}

		for _, d := range nc.GetInterfaces() {
			dev := &v1alpha1.Device{
				DeviceInterface: d.GetInterface(),
				DeviceMTU:       int(d.GetMtu()),
				DeviceDHCP:      new(d.GetDhcp()),
				DeviceIgnore:    new(d.GetIgnore()),
			}

			if d.GetCidr() != "" {
				dev.DeviceAddresses = []string{d.GetCidr()}
			}

			network.NetworkInterfaces = append(network.NetworkInterfaces, dev)
		}

		opts = append(opts, generate.WithNetworkOptions(v1alpha1.WithNetworkConfig(network)))
	}

	return opts
}
