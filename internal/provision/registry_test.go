package provision_test

import (
	"encoding/json"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"

	"github.com/talos-go/talos/internal/provision"
	_ "github.com/talos-go/talos/internal/provision/providers" // the kinds of node
	"github.com/talos-go/talos/internal/registry"
	"github.com/talos-go/talos/internal/testenv"
)

// --with-registry's registry: the nodes' configs trust its CA, carry its credentials and mirror
// every registry through it; the registry runs detached, takes a push with those credentials,
// and cluster destroy stops it.
func TestClusterRegistry(t *testing.T) {
	root := t.TempDir()
	c := &provision.Cluster{Name: "reg", Dir: filepath.Join(root, "reg"), Binary: testenv.MachinedBinary(t)}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}

	addr := netip.MustParseAddrPort(ln.Addr().String())
	ln.Close()

	reg, regPatch, err := provision.RegistryFiles(c.Dir, addr)
	if err != nil {
		t.Fatal(err)
	}

	c.Registry = reg

	// The patch, on a generated config.
	cfgs, err := provision.GenerateConfigs("reg", netip.MustParseAddr("10.5.0.2"), "", provision.GenerateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	patched, err := provision.Patch(cfgs.Worker, []string{regPatch})
	if err != nil {
		t.Fatal(err)
	}

	cfg, err := configloader.NewFromBytes(patched)
	if err != nil {
		t.Fatal(err)
	}

	var users map[string]string

	data, _ := os.ReadFile(filepath.Join(c.Dir, "registry", "users.json"))
	if err = json.Unmarshal(data, &users); err != nil || users[provision.RegistryUser] == "" {
		t.Fatalf("users.json: %s (%v)", data, err)
	}

	caPEM, _ := os.ReadFile(reg.CA)
	regs := cfg.Machine().Registries()

	if rc := regs.Config()[addr.String()]; rc == nil || rc.Auth() == nil || rc.Auth().Password() != users[provision.RegistryUser] || string(rc.TLS().CA()) != string(caPEM) {
		t.Fatalf("machine.registries.config of the patched config: %+v", rc)
	}

	if m := regs.Mirrors()["*"]; m == nil || len(m.Endpoints()) != 1 || m.Endpoints()[0].Endpoint() != "https://"+addr.String() {
		t.Fatalf("mirror of every registry: %+v", m)
	}

	if err = c.StartRegistry(addr, io.Discard); err != nil {
		t.Fatal(err)
	}

	if err = c.Save(); err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { provision.StopProcess("the registry", c.Registry.PID, c.Dir, 5*time.Second) })

	img, err := registry.Image(map[string][]byte{"hello": []byte("hi")}, "/hello")
	if err != nil {
		t.Fatal(err)
	}

	push := func(password string) error {
		return registry.Client{Username: provision.RegistryUser, Password: password, CA: caPEM}.Push(t.Context(), addr.String()+"/e2e/hello:v1", img)
	}

	// The detached process may still be starting: the listener is already open, so a push waits.
	if err = push(users[provision.RegistryUser]); err != nil {
		t.Fatal(err)
	}

	if err = push("wrong"); err == nil {
		t.Fatal("a wrong password was accepted")
	}

	if err = provision.Destroy(root, "reg", io.Discard); err != nil {
		t.Fatal(err)
	}

	if provision.ProcessRunning(c.Registry.PID, c.Dir) {
		t.Fatal("the registry outlived cluster destroy")
	}

	if conn, err := net.DialTimeout("tcp", addr.String(), time.Second); err == nil {
		conn.Close()
		t.Fatal("the registry's port still answers after cluster destroy")
	}
}
