package etcd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/talos-go/talos/internal/testenv"
)

// An init node (machine.type init) bootstraps the cluster itself, without the Bootstrap API,
// and the other control plane joins it; a Bootstrap asked of the init node is refused.
func TestInitNodeBootstrapsItself(t *testing.T) {
	caCert, caKey, err := testCA()
	if err != nil {
		t.Fatal(err)
	}

	c := newTestCluster(t, 2, caCert, caKey)
	initNode, other := c.nodes[0], c.nodes[1]
	initNode.opts.Init = true

	initNode.start()
	other.start()

	testenv.WaitFor(t, "the init node's cluster with both members voting", 2*time.Minute, func() error {
		return c.votersHealthy(other, 2)
	})

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	if err = initNode.m.Bootstrap(ctx, BootstrapOptions{}); !errors.Is(err, ErrAlreadyBootstrapped) {
		t.Errorf("bootstrap of the init node: %v, want it refused as already bootstrapped", err)
	}
}

// Without Init, a control plane waits for the Bootstrap API: no cluster starts by itself.
func TestControlPlaneWaitsForBootstrap(t *testing.T) {
	caCert, caKey, err := testCA()
	if err != nil {
		t.Fatal(err)
	}

	c := newTestCluster(t, 1, caCert, caKey)
	c.nodes[0].start()

	// It looked for a cluster, found none, and waits: it has decided not to start one (or it
	// started one, which fails below at once).
	testenv.WaitFor(t, "the control plane waiting for bootstrap", time.Minute, func() error {
		if p := c.nodes[0].m.Phase(); !strings.HasPrefix(p, "waiting for bootstrap") && !HasData(c.nodes[0].opts.DataDir) {
			return fmt.Errorf("phase %q", p)
		}

		return nil
	})

	if HasData(c.nodes[0].opts.DataDir) {
		t.Fatal("a control plane that is not an init node started a cluster without bootstrap")
	}
}
