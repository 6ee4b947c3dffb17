package controlplane_test

import (
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"

	"github.com/talos-go/talos/internal/machined/controllers/controlplane"
	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	"github.com/talos-go/talos/internal/testenv"
)

// An https extra manifest from a server of a private CA is fetched only once the node's roots
// hold that CA (as a TrustedRootsConfig adds it): the roots are read at each fetch.
func TestExtraManifestsTrustNodeRoots(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: private\n"))
	}))
	t.Cleanup(srv.Close)

	var (
		mu      sync.Mutex
		trusted bool
		asked   int // fetches so far: each reads the roots
	)

	roots := func() (*x509.CertPool, error) {
		mu.Lock()
		defer mu.Unlock()

		asked++

		pool := x509.NewCertPool()
		if trusted {
			pool.AddCert(srv.Certificate())
		}

		return pool, nil
	}

	env := ctest.Start(t, &controlplane.ExtraManifestController{Retry: 100 * time.Millisecond, Roots: roots})
	env.Put(ctest.MachineConfig(t, machine.TypeControlPlane, func(c *v1alpha1.Config) {
		c.ClusterConfig.ExtraManifests = []string{srv.URL + "/private.yaml"}
	}))

	fetched := func() bool {
		list, _ := env.State.List(env.Ctx, k8s.NewManifest(k8s.ControlPlaneNamespaceName, "").Metadata())
		for _, r := range list.Items {
			if strings.HasPrefix(r.Metadata().ID(), "99-extra-private-") {
				return true
			}
		}

		return false
	}

	// Three fetches began, so two ended, each refused as an unknown authority (or one that
	// should not have been fetched the manifest).
	testenv.WaitFor(t, "three fetches", 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()

		return asked >= 3 || fetched()
	})

	if fetched() {
		t.Fatal("the manifest was fetched from a server no root trusts")
	}

	mu.Lock()
	trusted = true
	mu.Unlock()

	deadline := time.Now().Add(10 * time.Second)
	for !fetched() {
		if time.Now().After(deadline) {
			t.Fatal("the manifest was not fetched once the server's CA was trusted")
		}

		time.Sleep(50 * time.Millisecond)
	}
}
