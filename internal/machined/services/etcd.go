package services

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"

	"github.com/talos-go/talos/internal/etcd"
	"github.com/talos-go/talos/internal/imager"
	"github.com/talos-go/talos/internal/images"
	networkctrl "github.com/talos-go/talos/internal/machined/controllers/network"
	"github.com/talos-go/talos/internal/machined/runtime"
	"github.com/talos-go/talos/internal/machined/system"
	"github.com/talos-go/talos/internal/machined/system/runner"
	"github.com/talos-go/talos/internal/machined/userfiles"
)

// EtcdServiceID is the supervisor ID of the etcd service.
const EtcdServiceID = "etcd"

// NewEtcdManager returns an etcd manager for the node of r, its options computed from r at
// each start; the node keeps the one it makes in r.Etcd.
func NewEtcdManager(r *runtime.Runtime) *etcd.Manager {
	return etcd.NewManager(func() (etcd.Options, error) { return EtcdOptions(r) })
}

// Etcd is the etcd service (control planes run it). It starts from its data, or after the
// Bootstrap API, or by joining a cluster found at the peers (see EtcdPeers) as a learner;
// it is healthy when it is a voting member reaching quorum.
func Etcd(r *runtime.Runtime) *system.Service {
	m := r.Etcd

	var deps []string
	if etcdInContainerd(r) {
		deps = []string{ContainerdServiceID}
	}

	svc := &system.Service{
		ID:        EtcdServiceID,
		DependsOn: deps,
		Runner:    func() (system.Runner, error) { return m.Runner(), nil },
		HealthFunc: func(ctx context.Context) error {
			return m.Health(ctx)
		},
		HealthSettings: system.HealthSettings{
			InitialDelay: time.Second,
			Period:       5 * time.Second,
			Timeout:      4 * time.Second,
		},
	}

	if r.Mode.OwnKernel() {
		svc.ConditionDescription, svc.Condition = "time sync", func(ctx context.Context) error { return waitTimeSync(ctx, r) }
	}

	return svc
}

// EtcdBinary finds the etcd command: next to machined's own binary, else on PATH.
func EtcdBinary(r *runtime.Runtime) (string, error) {
	if r.Binary != "" {
		p := filepath.Join(filepath.Dir(r.Binary), "etcd")
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}

	p, err := exec.LookPath("etcd")
	if err != nil {
		return "", fmt.Errorf("etcd binary not found next to %s nor on PATH: %w", r.Binary, err)
	}

	return p, nil
}

// EtcdOptions computes this node's etcd setup from the runtime and the active config.
func EtcdOptions(r *runtime.Runtime) (etcd.Options, error) {
	cfg := r.Config()

	switch t := r.MachineType(context.Background()); {
	case cfg == nil || cfg.Cluster() == nil || t == machine.TypeUnknown:
		return etcd.Options{}, errors.New("no machine config")
	case !t.IsControlPlane():
		return etcd.Options{}, errors.New("etcd runs on control planes only")
	}

	ca := cfg.Cluster().Etcd().CA()
	if ca == nil || len(ca.Crt) == 0 || len(ca.Key) == 0 {
		return etcd.Options{}, errors.New("cluster.etcd.ca is missing from the config")
	}

	bin, err := EtcdBinary(r)
	if err != nil {
		return etcd.Options{}, err
	}

	out, err := r.Logs.Writer(EtcdServiceID)
	if err != nil {
		return etcd.Options{}, err
	}

	o := etcd.Options{
		Binary:         bin,
		Name:           etcdMemberName(r),
		Address:        r.Address,
		ListenLoopback: !r.Mode.SharesHost(), // kube-apiserver reaches etcd on localhost:2379
		DataDir:        r.Paths.EtcdData(),
		SecretsDir:     r.Paths.Secrets("etcd"),
		CACert:         ca.Crt,
		CAKey:          ca.Key,
		ClusterToken:   cfg.Cluster().ID(),
		ExtraArgs:      cfg.Cluster().Etcd().ExtraArgs(),
		// cluster.etcd.advertisedSubnets and listenSubnets choose among the node's routed
		// addresses; VIPs are never advertised (they move between control planes).
		Addresses:         etcdNodeAddresses(r),
		AdvertisedSubnets: cfg.Cluster().Etcd().AdvertisedSubnets(),
		ListenSubnets:     cfg.Cluster().Etcd().ListenSubnets(),
		ExcludeSubnets:    configVIPs(cfg),
		Init:              r.MachineType(context.Background()) == machine.TypeInit,
		Peers:             func(ctx context.Context) ([]string, error) { return EtcdPeers(ctx, r) },
		Output:            out,
		Log:               r.Log,
		Env:               userfiles.Env(cfg),
		OOMScoreAdj:       oomScoreEtcd,
	}

	if etcdInContainerd(r) {
		o.Runner = etcdContainer(r, o)
	}

	return o, nil
}

// etcdInContainerd reports whether etcd runs through containerd, as upstream: where machined is
// the node's init with containerd and the node image carries etcd's image. A node process on a
// shared host (process mode) runs etcd as a confined process.
func etcdInContainerd(r *runtime.Runtime) bool {
	if !r.Mode.RunsContainerd() {
		return false
	}

	return etcdImageArchive() != ""
}

// etcdImageArchive is the node image's archive that holds etcd's image, or "".
func etcdImageArchive() string {
	for _, a := range []string{imager.EtcdImageArchive, imager.KubernetesImagesArchive} {
		if _, err := os.Stat(a); err == nil {
			return a
		}
	}

	return ""
}

// etcdContainer runs etcd as the container etcd of containerd's system namespace, from the node
// image's etcd image, on the node's network, with its data folder and certificates bound in.
func etcdContainer(r *runtime.Runtime, o etcd.Options) func([]string) system.Runner {
	paths := NewContainerdPaths(r.Paths)

	return func(args []string) system.Runner {
		return &runner.Containerd{
			Socket:  paths.Socket,
			ID:      EtcdServiceID,
			Image:   images.Etcd,
			Archive: etcdImageArchive(),
			Args:    append([]string{images.EtcdPath}, args[1:]...),
			Mounts: []specs.Mount{
				{Type: "bind", Source: o.DataDir, Destination: o.DataDir, Options: []string{"rbind", "rw"}},
				{Type: "bind", Source: o.SecretsDir, Destination: o.SecretsDir, Options: []string{"rbind", "ro"}},
			},
			HostNetwork: true,
			Env:         o.Env,
			OOMScoreAdj: o.OOMScoreAdj,
			Log:         o.Log,
			// Upstream's soft protection of etcd's memory (memory.low on cgroup v2, the
			// soft limit on v1) and its CPU shares, in upstream's /podruntime/etcd.
			MemoryReservation: constants.CgroupEtcdReservedMemory,
			CPUShares:         etcdCPUShares,
			Cgroup:            cgroupOf(r, etcdCgroup),
			FIFODir:           paths.FIFO,
			Output:            o.Output,
			GracefulTimeout:   15 * time.Second,
		}
	}
}

// etcdNodeAddresses are the node's routed addresses (NodeAddress routed), none before they
// are known.
func etcdNodeAddresses(r *runtime.Runtime) []netip.Addr {
	if r.State == nil {
		return nil
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()

	res, err := safe.StateGetByID[*network.NodeAddress](ctx, r.State, network.NodeAddressRoutedID)
	if err != nil {
		return nil
	}

	return res.TypedSpec().IPs()
}

// configVIPs are the config's shared virtual IPs, on links and VLANs.
func configVIPs(cfg config.Config) []string {
	var out []string

	if cfg.Machine() == nil {
		return nil
	}

	for _, dev := range cfg.Machine().Network().Devices() {
		if v := dev.VIPConfig(); v != nil && v.IP() != "" {
			out = append(out, v.IP())
		}

		for _, vlan := range dev.Vlans() {
			if v := vlan.VIPConfig(); v != nil && v.IP() != "" {
				out = append(out, v.IP())
			}
		}
	}

	return out
}

// etcdMemberName is the node's hostname, else a name made from its address.
func etcdMemberName(r *runtime.Runtime) string {
	if cfg := r.Config(); cfg != nil && cfg.Machine() != nil && cfg.Machine().Network() != nil {
		if h := cfg.Machine().Network().Hostname(); h != "" {
			return h
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()

	if r.State != nil {
		if res, err := safe.StateGetByID[*network.HostnameStatus](ctx, r.State, network.HostnameID); err == nil {
			if h := res.TypedSpec().Hostname; h != "" {
				return h
			}
		}
	}

	// What the hostname controller generates for a node without a configured hostname.
	return networkctrl.GeneratedHostname(r.Address)
}

// EtcdPeers are the places where a joining control plane looks for the cluster:
//   - the host of cluster.controlPlane.endpoint (an IP, or a name resolved here): in container
//     mode this is the first control plane's loopback address, so bootstrap that node;
//   - the addresses of every control plane in the cluster discovery Members (namespace
//     cluster), when discovery runs.
//
// Own address is skipped by the etcd manager.
func EtcdPeers(ctx context.Context, r *runtime.Runtime) ([]string, error) {
	var peers []string

	if cfg := r.Config(); cfg != nil && cfg.Cluster() != nil {
		if u := cfg.Cluster().Endpoint(); u != nil && u.Hostname() != "" {
			host := u.Hostname()

			if net.ParseIP(host) != nil {
				peers = append(peers, host)
			} else if addrs, err := net.DefaultResolver.LookupHost(ctx, host); err == nil {
				peers = append(peers, addrs...)
			}
		}
	}

	if r.State != nil {
		members, err := safe.StateListAll[*cluster.Member](ctx, r.State)
		if err == nil {
			for m := range members.All() {
				spec := m.TypedSpec()
				if !spec.MachineType.IsControlPlane() {
					continue
				}

				for _, a := range spec.Addresses {
					peers = append(peers, a.String())
				}
			}
		}
	}

	return peers, nil
}
