package secrets_test

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"math/big"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/controller"
	cosiruntime "github.com/cosi-project/runtime/pkg/controller/runtime"
	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"go.uber.org/zap/zaptest"

	"github.com/talos-go/talos/internal/apid/certs"
	configctrl "github.com/talos-go/talos/internal/machined/controllers/config"
	secretsctrl "github.com/talos-go/talos/internal/machined/controllers/secrets"
	"github.com/talos-go/talos/internal/machined/resources"
	"github.com/talos-go/talos/internal/trustd"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *clock) Set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

func parse(t *testing.T, data []byte) *x509.Certificate {
	t.Helper()

	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatal("no PEM")
	}

	crt, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}

	return crt
}

// waitAPI waits for an API resource whose server certificate satisfies cond.
func waitAPI(ctx context.Context, t *testing.T, st state.State, cond func(srv *x509.Certificate) bool) *secrets.API {
	t.Helper()

	var got *secrets.API

	_, err := st.WatchFor(ctx, secrets.NewAPI().Metadata(), state.WithCondition(func(r resource.Resource) (bool, error) {
		if resource.IsTombstone(r) {
			return false, nil
		}

		api := r.(*secrets.API)
		if api.TypedSpec().Server == nil || !cond(parse(t, api.TypedSpec().Server.Crt)) {
			return false, nil
		}

		got = api

		return true, nil
	}))
	if err != nil {
		t.Fatalf("waiting for API certificates: %v", err)
	}

	return got
}

func TestAPICertificatesRotate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	st, err := resources.NewState(ctx)
	if err != nil {
		t.Fatal(err)
	}

	rt, err := cosiruntime.NewRuntime(st, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}

	clk := &clock{t: time.Now()}
	dir := t.TempDir()

	for _, c := range []controller.Controller{
		&configctrl.MachineTypeController{},
		&secretsctrl.RootController{},
		&secretsctrl.APICertSANsController{},
		&secretsctrl.APIController{Lifetime: 24 * time.Hour, Now: clk.Now, Check: 10 * time.Millisecond},
		&secretsctrl.APIFilesController{Dir: filepath.Join(dir, "apid")},
		&secretsctrl.TrustdController{Lifetime: 24 * time.Hour},
		&secretsctrl.TrustdFilesController{Dir: filepath.Join(dir, "trustd")},
	} {
		if err = rt.RegisterController(c); err != nil {
			t.Fatal(err)
		}
	}

	done := make(chan error, 1)

	go func() { done <- rt.Run(ctx) }()

	defer func() {
		cancel()

		if err := <-done; err != nil {
			t.Error(err)
		}
	}()

	in, err := generate.NewInput("test", "https://10.0.0.100:6443", constants.DefaultKubernetesVersion)
	if err != nil {
		t.Fatal(err)
	}

	cfg, err := in.Config(machine.TypeControlPlane)
	if err != nil {
		t.Fatal(err)
	}

	hostname := network.NewHostnameStatus(network.NamespaceName, network.HostnameID)
	hostname.TypedSpec().Hostname = "node1"

	addrs := network.NewNodeAddress(network.NamespaceName, network.NodeAddressAccumulativeID)
	addrs.TypedSpec().Addresses = []netip.Prefix{netip.MustParsePrefix("10.0.0.1/24")}

	for _, r := range []resource.Resource{config.NewMachineConfig(cfg), hostname, addrs} {
		if err = st.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
	}

	has := func(ip string) func(*x509.Certificate) bool {
		return func(c *x509.Certificate) bool {
			for _, a := range c.IPAddresses {
				if a.String() == ip {
					return true
				}
			}

			return false
		}
	}

	api := waitAPI(ctx, t, st, has("10.0.0.1"))
	first := parse(t, api.TypedSpec().Server.Crt)

	if first.VerifyHostname("node1") != nil {
		t.Errorf("server certificate lacks the hostname: %v", first.DNSNames)
	}

	if d := first.NotAfter.Sub(first.NotBefore); d < 23*time.Hour || d > 25*time.Hour {
		t.Errorf("lifetime %v, want a day", d)
	}

	client := parse(t, api.TypedSpec().Client.Crt)
	if len(client.Subject.Organization) != 1 || client.Subject.Organization[0] != "os:impersonator" {
		t.Errorf("client organization %v", client.Subject.Organization)
	}

	// apid's files follow, 0600, and load.
	apidDir := filepath.Join(dir, "apid")
	waitFile(ctx, t, filepath.Join(apidDir, certs.CA))

	if _, err = certs.Load(apidDir); err != nil {
		t.Fatal(err)
	}

	for _, name := range certs.All {
		if fi, err := os.Stat(filepath.Join(apidDir, name)); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v", name, fi.Mode().Perm(), err)
		}
	}

	// trustd's folder on a control plane: CA, token and a serving certificate for the
	// endpoint host too.
	trustdDir := filepath.Join(dir, "trustd")
	waitFile(ctx, t, filepath.Join(trustdDir, trustd.ServerCrt))

	b, err := trustd.LoadBundle(trustdDir)
	if err != nil {
		t.Fatal(err)
	}

	tcrt, _ := x509.ParseCertificate(b.Server.Certificate[0])
	if tcrt.VerifyHostname("10.0.0.100") != nil || tcrt.VerifyHostname("10.0.0.1") != nil {
		t.Errorf("trustd certificate names: %v %v", tcrt.IPAddresses, tcrt.DNSNames)
	}

	// A new address: reissued with it.
	if _, err = safe.StateUpdateWithConflicts(ctx, st, addrs.Metadata(), func(r *network.NodeAddress) error {
		r.TypedSpec().Addresses = []netip.Prefix{netip.MustParsePrefix("10.0.0.2/24")}

		return nil
	}); err != nil {
		t.Fatal(err)
	}

	api = waitAPI(ctx, t, st, has("10.0.0.2"))
	second := parse(t, api.TypedSpec().Server.Crt)

	if has("10.0.0.1")(second) {
		t.Error("old address kept")
	}

	// The wall clock jumps 20 hours ahead (past two thirds of the lifetime): renewed.
	clk.Set(clk.Now().Add(20 * time.Hour))

	third := parse(t, waitAPI(ctx, t, st, notSerial(second.SerialNumber)).TypedSpec().Server.Crt)
	if !third.NotBefore.After(second.NotBefore.Add(19 * time.Hour)) {
		t.Errorf("renewed certificate starts at %v, the clock is at %v", third.NotBefore, clk.Now())
	}

	// The clock jumps back before the certificate's start: renewed again.
	clk.Set(clk.Now().Add(-48 * time.Hour))
	waitAPI(ctx, t, st, notSerial(third.SerialNumber))
}

func notSerial(n *big.Int) func(*x509.Certificate) bool {
	return func(c *x509.Certificate) bool { return c.SerialNumber.Cmp(n) != 0 }
}

func waitFile(ctx context.Context, t *testing.T, path string) {
	t.Helper()

	for {
		if _, err := os.Stat(path); err == nil {
			return
		}

		select {
		case <-ctx.Done():
			t.Fatalf("%s did not appear", path)
		case <-time.After(10 * time.Millisecond):
		}
	}
}
