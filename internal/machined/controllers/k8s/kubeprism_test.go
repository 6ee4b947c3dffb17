package k8s_test

import (
	"bufio"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/stretchr/testify/assert"

	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	k8sctrl "github.com/talos-go/talos/internal/machined/controllers/k8s"
	"github.com/talos-go/talos/internal/testenv"
)

// TestKubePrism: a control plane with KubePrism balances over its own API server, the cluster
// endpoint and the control plane members; it serves on 127.0.0.1:<port> and reports healthy
// once an upstream answers; disabling it removes all of it.
func TestKubePrism(t *testing.T) {
	// The local API server: something listening on a free port.
	apiserver, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer apiserver.Close()

	apiPort := apiserver.Addr().(*net.TCPAddr).Port

	free, _ := net.Listen("tcp", "127.0.0.1:0")
	prismPort := free.Addr().(*net.TCPAddr).Port
	free.Close()

	e := ctest.Start(t, &k8sctrl.KubePrismController{})

	member := cluster.NewMember(cluster.NamespaceName, "cp2")
	member.TypedSpec().MachineType = machine.TypeControlPlane
	// The members' addresses are TEST-NET ones (RFC 5737): nothing answers there, while a
	// 10.5.0.x could be a real API server of a container cluster another test runs beside this
	// one, which greets nobody.
	member.TypedSpec().Addresses = []netip.Addr{netip.MustParseAddr("192.0.2.3"), netip.MustParseAddr("10.244.1.0")} // and its flannel.1
	worker := cluster.NewMember(cluster.NamespaceName, "w1")
	worker.TypedSpec().MachineType = machine.TypeWorker
	worker.TypedSpec().Addresses = []netip.Addr{netip.MustParseAddr("192.0.2.9")}
	e.Create(member, worker)

	cfg := ctest.MachineConfig(t, machine.TypeControlPlane, func(c *v1alpha1.Config) {
		c.ClusterConfig.APIServerConfig = &v1alpha1.APIServerConfig{}
		c.ClusterConfig.ControlPlane.LocalAPIServerPort = apiPort
		c.MachineConfig.MachineFeatures.KubePrismSupport = &v1alpha1.KubePrism{ServerEnabled: new(true), ServerPort: prismPort}
	})
	e.Create(cfg)

	ctest.AssertResource(e, k8s.KubePrismConfigID, func(r *k8s.KubePrismConfig, a *assert.Assertions) {
		a.Equal("127.0.0.1", r.TypedSpec().Host)
		a.Equal(prismPort, r.TypedSpec().Port)
		a.Equal([]k8s.KubePrismEndpoint{
			{Host: "localhost", Port: uint32(apiPort)},
			{Host: ctest.EndpointHost, Port: 6443},
			{Host: "192.0.2.3", Port: 6443},
		}, r.TypedSpec().Endpoints)
	})

	ctest.AssertResource(e, k8s.KubePrismStatusesID, func(r *k8s.KubePrismStatuses, a *assert.Assertions) {
		a.Equal("127.0.0.1:"+strconv.Itoa(prismPort), r.TypedSpec().Host)
		a.True(r.TypedSpec().Healthy, "the local API server answers")
	})

	// The balancer itself: a connection to it reaches the local API server, which greets it.
	go func() {
		for {
			c, err := apiserver.Accept()
			if err != nil {
				return
			}

			c.Write([]byte("api\n"))
			c.Close()
		}
	}()

	// Polled: until the balancer has seen which upstreams answer, a connection may first try
	// those that do not (192.0.2.3 here, up to the balancer's 5 s dial timeout each).
	testenv.WaitFor(t, "the local API server's greeting through KubePrism", time.Minute, func() error {
		c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(prismPort))
		if err != nil {
			return fmt.Errorf("KubePrism does not listen: %w", err)
		}

		greeting, _ := bufio.NewReader(c).ReadString('\n')
		c.Close()

		if greeting != "api\n" {
			return fmt.Errorf("through KubePrism: %q, want the local API server's greeting", greeting)
		}

		return nil
	})

	// Disabled: the resources go and the port is released.
	e.Put(ctest.MachineConfig(t, machine.TypeControlPlane, func(c *v1alpha1.Config) {
		c.MachineConfig.MachineFeatures.KubePrismSupport = &v1alpha1.KubePrism{ServerEnabled: new(false)}
	}))

	ctest.AssertNoResource[*k8s.KubePrismConfig](e, k8s.KubePrismConfigID)
	ctest.AssertNoResource[*k8s.KubePrismStatuses](e, k8s.KubePrismStatusesID)
	ctest.AssertNoResource[*k8s.KubePrismEndpoints](e, k8s.KubePrismEndpointsID)
}
