package cluster_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/kubespan"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"

	"github.com/talos-go/talos/internal/discovery"
	clusterctrl "github.com/talos-go/talos/internal/machined/controllers/cluster"
	configctrl "github.com/talos-go/talos/internal/machined/controllers/config"
	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	secretsctrl "github.com/talos-go/talos/internal/machined/controllers/secrets"
	"github.com/talos-go/talos/internal/trustd"
)

// testAddr is a loopback address of this test binary (127.82/16 is the cluster tests').
func testAddr(host int) string {
	return fmt.Sprintf("127.82.%d.%d", os.Getpid()%250+1, host)
}

// node is what the network controllers publish about a node: its hostname and addresses.
func node(hostname, addr string, more ...string) []resource.Resource {
	status := network.NewHostnameStatus(network.NamespaceName, network.HostnameID)
	status.TypedSpec().Hostname = hostname

	out := []resource.Resource{status}

	for _, id := range []resource.ID{network.NodeAddressCurrentID, network.NodeAddressAccumulativeID} {
		res := network.NewNodeAddress(network.NamespaceName, id)
		for _, a := range append([]string{addr}, more...) {
			res.TypedSpec().Addresses = append(res.TypedSpec().Addresses, netip.PrefixFrom(netip.MustParseAddr(a), 32))
		}

		out = append(out, res)
	}

	return out
}

// registry dials the discovery registry on host with the cluster's CA and token, as a node
// does.
func registry(t *testing.T, host string, ca []byte, token string) *grpc.ClientConn {
	t.Helper()

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)

	conn, err := grpc.NewClient(net.JoinHostPort(host, strconv.Itoa(constants.TrustdPort)),
		grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: host, MinVersion: tls.VersionTLS12})),
		grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			return invoker(metadata.AppendToOutgoingContext(ctx, trustd.TokenMetadataKey, token), method, req, reply, cc, opts...)
		}),
	)
	require.NoError(t, err)

	t.Cleanup(func() { conn.Close() })

	return conn
}

// TestMembers: a control plane lists itself, and the nodes its registry (the real trustd, fed
// by the secrets controllers) knows.
func TestMembers(t *testing.T) {
	cpAddr := testAddr(1)
	trustdDir := filepath.Join(t.TempDir(), "trustd")

	env := ctest.Start(t,
		configctrl.NewMachineTypeController(),
		secretsctrl.NewRootController(),
		secretsctrl.NewAPICertSANsController(),
		&secretsctrl.TrustdController{},
		&secretsctrl.TrustdFilesController{Dir: trustdDir},
		&clusterctrl.IdentityController{StateDir: t.TempDir()},
		&clusterctrl.MemberController{},
	)

	cfg := ctest.MachineConfig(t, machine.TypeControlPlane, func(c *v1alpha1.Config) {
		u := *c.ClusterConfig.ControlPlane.Endpoint.URL
		u.Host = net.JoinHostPort(cpAddr, "6443")
		c.ClusterConfig.ControlPlane.Endpoint.URL = &u
	})
	// Its flannel and CNI bridge addresses (pod subnet) are not given to the others.
	env.Create(append(node("cp1", cpAddr, "10.244.0.0", "10.244.0.1"), cfg)...)

	env.WaitFile(filepath.Join(trustdDir, trustd.ServerCrt))
	ctest.ServeTrustd(t, trustdDir, cpAddr)

	var self string

	ctest.AssertResource(env, cluster.LocalIdentity, func(r *cluster.Identity, a *assert.Assertions) { self = r.TypedSpec().NodeID })

	ctest.AssertResource(env, "cp1", func(r *cluster.Member, a *assert.Assertions) {
		spec := r.TypedSpec()
		a.Equal(self, spec.NodeID)
		a.Equal("cp1", spec.Hostname)
		a.Equal(machine.TypeControlPlane, spec.MachineType)
		a.Equal([]netip.Addr{netip.MustParseAddr(cpAddr)}, spec.Addresses)
		a.Contains(spec.OperatingSystem, "(")

		if a.NotNil(spec.ControlPlane) {
			a.Equal(constants.DefaultControlPlanePort, spec.ControlPlane.APIServerPort)
		}
	})

	// A worker registers with the control plane's registry: the control plane lists it at its
	// next exchange, and the worker sees the control plane at its own next one.
	sec := cfg.Config().Machine().Security()
	conn := registry(t, cpAddr, sec.IssuingCA().Crt, sec.Token())
	worker := discovery.Affiliate{
		NodeID: "worker-id", Hostname: "worker1", MachineType: machine.TypeWorker.String(),
		Addresses: []string{"10.0.0.7", "not an address"},
		KubeSpan:  &discovery.KubeSpan{PublicKey: "worker-key", Address: "fd00::7", Endpoints: []string{"10.0.0.7:51820"}},
	}

	// The control plane runs KubeSpan: its affiliate carries its key and WireGuard endpoints,
	// never its KubeSpan address as an endpoint or a node address; with
	// advertiseKubernetesNetworks, its pod networks.
	ks := kubespan.NewIdentity(kubespan.NamespaceName, kubespan.LocalIdentity)
	ks.TypedSpec().PublicKey, ks.TypedSpec().Subnet, ks.TypedSpec().Address = "cp-key", netip.MustParsePrefix("fd00::/64"), netip.MustParsePrefix("fd00::1/128")
	ksCfg := kubespan.NewConfig(config.NamespaceName, kubespan.ConfigID)
	ksCfg.TypedSpec().Enabled, ksCfg.TypedSpec().AdvertiseKubernetesNetworks, ksCfg.TypedSpec().HarvestExtraEndpoints = true, true, true
	env.Create(ks, ksCfg)

	_, err := discovery.Exchange(env.Ctx, conn, worker)
	require.NoError(t, err)

	ctest.AssertResource(env, "worker1", func(r *cluster.Member, a *assert.Assertions) {
		spec := r.TypedSpec()
		a.Equal("worker-id", spec.NodeID)
		a.Equal(machine.TypeWorker, spec.MachineType)
		a.Equal([]netip.Addr{netip.MustParseAddr("10.0.0.7")}, spec.Addresses)
		a.Nil(spec.ControlPlane)
	})

	ctest.AssertIDs[*cluster.Member](env, "cp1", "worker1")

	ctest.AssertResource(env, "worker-id", func(r *cluster.Affiliate, a *assert.Assertions) {
		a.Equal("worker-key", r.TypedSpec().KubeSpan.PublicKey)
		a.Equal(netip.MustParseAddr("fd00::7"), r.TypedSpec().KubeSpan.Address)
		a.Equal([]netip.AddrPort{netip.MustParseAddrPort("10.0.0.7:51820")}, r.TypedSpec().KubeSpan.Endpoints)
	})

	list, err := discovery.Exchange(env.Ctx, conn, worker)
	require.NoError(t, err)
	assert.Equal(t, []string{"cp1", "worker1"}, hostnames(list))

	if cp := list[0]; assert.NotNil(t, cp.KubeSpan) {
		assert.Equal(t, "cp-key", cp.KubeSpan.PublicKey)
		assert.Equal(t, "fd00::1", cp.KubeSpan.Address)
		assert.Equal(t, []string{net.JoinHostPort(cpAddr, "51820")}, cp.KubeSpan.Endpoints)
		assert.Equal(t, []string{"10.244.0.0/32", "10.244.0.1/32"}, cp.KubeSpan.AdditionalAddresses)
		assert.NotContains(t, cp.Addresses, "fd00::1")
	}

	// harvestExtraEndpoints: the control plane's KubeSpan is up with the worker at an endpoint the
	// worker did not announce; the registry gives it to everyone as one of the worker's.
	st := kubespan.NewPeerStatus(kubespan.NamespaceName, "worker-key")
	st.TypedSpec().State, st.TypedSpec().Endpoint = kubespan.PeerStateUp, netip.MustParseAddrPort("192.0.2.7:40000")
	env.Create(st)

	assert.EventuallyWithT(t, func(c *assert.CollectT) {
		list, err := discovery.Exchange(env.Ctx, conn, worker)
		if assert.NoError(c, err) && assert.Len(c, list, 2) {
			assert.Equal(c, []string{"10.0.0.7:51820", "192.0.2.7:40000"}, list[1].KubeSpan.Endpoints)
		}
	}, 10*time.Second, 100*time.Millisecond)

	// A wrong token is refused: the registry is the cluster's only.
	_, err = discovery.Exchange(env.Ctx, registry(t, cpAddr, sec.IssuingCA().Crt, "wrong"), discovery.Affiliate{NodeID: "intruder", Hostname: "intruder"})
	require.Error(t, err)
}

func hostnames(list []discovery.Affiliate) []string {
	out := make([]string, 0, len(list))
	for _, a := range list {
		out = append(out, a.Hostname)
	}

	return out
}

// TestMembersWithoutRegistry: with no registry answering, a node still lists itself, and its
// entry follows its hostname.
func TestMembersWithoutRegistry(t *testing.T) {
	env := ctest.Start(t,
		&clusterctrl.IdentityController{StateDir: t.TempDir()},
		&clusterctrl.MemberController{},
	)
	env.Create(append(node("old", testAddr(2)), ctest.MachineConfig(t, machine.TypeWorker))...)

	ctest.AssertResource(env, "old", func(r *cluster.Member, a *assert.Assertions) {
		a.Equal(machine.TypeWorker, r.TypedSpec().MachineType)
	})

	ctest.Update(env, network.NewHostnameStatus(network.NamespaceName, network.HostnameID), func(r *network.HostnameStatus) error {
		r.TypedSpec().Hostname = "new"

		return nil
	})

	ctest.AssertResource(env, "new", func(r *cluster.Member, a *assert.Assertions) {
		a.Equal([]netip.Addr{netip.MustParseAddr(testAddr(2))}, r.TypedSpec().Addresses)
	})
	ctest.AssertNoResource[*cluster.Member](env, "old")
}

// TestMembersDiscoveryDisabled: cluster.discovery.enabled false (or its service registry
// disabled) lists no members, as upstream; enabling it again lists the node.
func TestMembersDiscoveryDisabled(t *testing.T) {
	env := ctest.Start(t,
		&clusterctrl.IdentityController{StateDir: t.TempDir()},
		&clusterctrl.MemberController{},
	)

	cfg := func(enabled, service bool) resource.Resource {
		return ctest.MachineConfig(t, machine.TypeWorker, func(c *v1alpha1.Config) {
			c.ClusterConfig.ClusterDiscoveryConfig = &v1alpha1.ClusterDiscoveryConfig{
				DiscoveryEnabled: new(enabled),
				DiscoveryRegistries: v1alpha1.DiscoveryRegistriesConfig{
					RegistryService: v1alpha1.RegistryServiceConfig{RegistryDisabled: new(!service)},
				},
			}
		})
	}

	env.Create(append(node("w1", testAddr(3)), cfg(true, true))...)
	ctest.AssertIDs[*cluster.Member](env, "w1")

	env.Put(cfg(false, true))
	ctest.AssertIDs[*cluster.Member](env)
	ctest.AssertIDs[*cluster.Affiliate](env)

	env.Put(cfg(true, true))
	ctest.AssertIDs[*cluster.Member](env, "w1")

	env.Put(cfg(true, false))
	ctest.AssertIDs[*cluster.Member](env)
}
