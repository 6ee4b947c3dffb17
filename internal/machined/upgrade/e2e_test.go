package upgrade_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	machinetype "github.com/siderolabs/talos/pkg/machinery/config/machine"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/talos-go/talos/internal/bootloader"
	"github.com/talos-go/talos/internal/imager"
	"github.com/talos-go/talos/internal/meta"
	"github.com/talos-go/talos/internal/slots"
	"github.com/talos-go/talos/internal/talosctl"
	"github.com/talos-go/talos/internal/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()

	testenv.RemoveBinaries()
	os.Exit(code)
}

// images holds what the upgrade tests share: a signing key and signed images.
type images struct {
	priv                  ed25519.PrivateKey
	etcd                  string
	dir, pub              string
	good, broken, foreign string
	tampered              string
}

const vX, vX1, vBroken, vX2 = "v9.0.0", "v9.0.1", "v9.0.2", "v9.0.3"

// image signs an image of version (a node binary built with that tag) with the images' key.
func (im *images) image(t *testing.T, version string) string {
	t.Helper()

	path := filepath.Join(im.dir, version+".img")
	if _, err := imager.BuildFile(path, imager.BuildOptions{Version: version, Key: im.priv, Compress: true,
		Files: map[string]string{imager.MachinedName: testenv.MachinedVersion(t, version), imager.EtcdName: im.etcd}}); err != nil {
		t.Fatal(err)
	}

	return path
}

// makeImages signs images of X+1 (and broken ones). etcd is the etcd binary to put in them;
// "" puts a stand-in, enough where etcd is not run (workers).
func makeImages(t *testing.T, etcd string) *images {
	t.Helper()

	dir := t.TempDir()
	binX1 := testenv.MachinedVersion(t, vX1)

	keyDir := filepath.Join(dir, "keys")
	if _, err := imager.GenerateKey(filepath.Join(keyDir, "image.key"), filepath.Join(keyDir, "image.pub")); err != nil {
		t.Fatal(err)
	}

	priv, err := imager.LoadPrivateKey(filepath.Join(keyDir, "image.key"))
	if err != nil {
		t.Fatal(err)
	}

	if etcd == "" {
		etcd = filepath.Join(dir, "etcd")
		testenv.WriteFile(t, etcd, "#!/bin/sh\nexit 0\n", 0o755)
	}

	broken := filepath.Join(dir, "broken")
	testenv.WriteFile(t, broken, "#!/bin/sh\necho broken machined >&2\nexit 3\n", 0o755)

	image := func(name, version, machined string, key []byte) string {
		path := filepath.Join(dir, name)
		if _, err := imager.BuildFile(path, imager.BuildOptions{Version: version, Key: key, Compress: true,
			Files: map[string]string{imager.MachinedName: machined, imager.EtcdName: etcd}}); err != nil {
			t.Fatal(err)
		}

		return path
	}

	_, otherPriv, _ := ed25519Key(t)

	im := &images{
		priv: priv, etcd: etcd,
		dir: dir, pub: filepath.Join(keyDir, "image.pub"),
		good:    image("good.img", vX1, binX1, priv),
		broken:  image("broken.img", vBroken, broken, priv),
		foreign: image("foreign.img", vX1, binX1, otherPriv),
	}

	im.tampered = filepath.Join(dir, "tampered.img")
	data, _ := os.ReadFile(im.good)
	data[len(data)/2] ^= 0xff
	testenv.WriteFile(t, im.tampered, string(data), 0o644)

	return im
}

// bootNode starts a node through the boot stage.
type bootNode struct {
	state  string
	cmd    *exec.Cmd
	out    *testenv.SyncBuffer
	exited chan error
}

func startBootNode(t *testing.T, bin, state string, args ...string) *bootNode {
	t.Helper()

	n := &bootNode{state: state, out: &testenv.SyncBuffer{}, exited: make(chan error, 1)}
	n.cmd = exec.Command(bin, append([]string{"boot", "--state", state}, args...)...)
	n.cmd.Stdout, n.cmd.Stderr = n.out, n.out

	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}

	go func() { n.exited <- n.cmd.Wait() }()

	t.Cleanup(func() {
		select {
		case err := <-n.exited:
			n.exited <- err

			return
		default:
		}

		n.cmd.Process.Signal(syscall.SIGTERM)

		select {
		case <-n.exited:
		case <-time.After(30 * time.Second):
			n.cmd.Process.Kill()
			t.Errorf("node did not stop on SIGTERM\n%s", n.out)
		}
	})

	return n
}

func (n *bootNode) socket() string {
	return filepath.Join(n.state, "system", "run", "machined", "machined.sock")
}

func (n *bootNode) client(t *testing.T) *client.Client {
	t.Helper()

	c, err := client.New(context.Background(), client.WithUnixSocket(n.socket()),
		client.WithGRPCDialOptions(grpc.WithTransportCredentials(insecure.NewCredentials())))
	if err != nil {
		t.Fatal(err)
	}

	return c
}

// started is when the running machined made its machine status: a restart changes it.
func (n *bootNode) started(t *testing.T) time.Time {
	t.Helper()

	c := n.client(t)
	defer c.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	ms, err := safe.StateGetByID[*runtimeres.MachineStatus](ctx, c.COSI, runtimeres.MachineStatusID)
	if err != nil {
		t.Fatalf("machine status: %v", err)
	}

	return ms.Metadata().Created()
}

// version asks the node for its version once.
func (n *bootNode) version(t *testing.T) (string, error) {
	c := n.client(t)
	defer c.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()

	resp, err := c.MachineClient.Version(ctx, &emptypb.Empty{})
	if err != nil {
		return "", err
	}

	return resp.Messages[0].Version.Tag, nil
}

// waitFor polls cond until it holds, and gives up at once if the node exits.
func (n *bootNode) waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()

	testenv.WaitFor(t, what, 3*time.Minute, func() error {
		ok, state := cond()
		if ok {
			return nil
		}

		select {
		case err := <-n.exited:
			n.exited <- err
			t.Fatalf("%s: node exited (%v); last state %s\n%s", what, err, state, n.out)
		default:
		}

		return fmt.Errorf("last state %s\n%s", state, n.out)
	})
}

func (n *bootNode) waitVersion(t *testing.T, want string) {
	t.Helper()

	n.waitFor(t, "version "+want, func() (bool, string) {
		v, err := n.version(t)
		if err != nil {
			return false, err.Error()
		}

		return v == want, v
	})
}

func (n *bootNode) meta(t *testing.T) meta.Values {
	t.Helper()

	s, err := meta.Open(filepath.Join(n.state, "META"))
	if err != nil {
		t.Fatal(err)
	}

	v, err := s.Read()
	if err != nil {
		t.Fatal(err)
	}

	return v
}

// waitSettled waits until no trial is pending and the running version is want.
func (n *bootNode) waitSettled(t *testing.T, want string) {
	t.Helper()
	n.waitVersion(t, want)

	n.waitFor(t, "boot settled on "+want, func() (bool, string) {
		v := n.meta(t)

		return v[meta.TrialSlot] == "" && v[meta.BootOnce] == "", fmt.Sprint(v)
	})
}

func (n *bootNode) upgrade(t *testing.T, image string, preserve bool) error {
	t.Helper()

	c := n.client(t)
	defer c.Close()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	resp, err := c.UpgradeWithOptions(ctx, client.WithUpgradeImage(image), client.WithUpgradePreserve(preserve))
	if err != nil {
		return err
	}

	if resp.Messages[0].ActorId == "" || !strings.Contains(resp.Messages[0].Ack, "upgrading to") {
		t.Fatalf("upgrade reply: %v", resp)
	}

	return nil
}

// talosctl runs a talosctl command against the node's machine API socket.
func (n *bootNode) talosctl(t *testing.T, args ...string) string {
	t.Helper()

	var stdout, stderr bytes.Buffer

	if code := talosctl.Execute(append([]string{"--machined-socket", n.socket()}, args...), &stdout, &stderr); code != 0 {
		t.Fatalf("talosctl %v: exit %d\n%s%s", args, code, stdout.String(), stderr.String())
	}

	return stdout.String()
}

func slotOf(t *testing.T, n *bootNode) string {
	return n.meta(t)[meta.ActiveSlot]
}

// TestUpgradeEndToEnd runs a node through the boot stage from version X, upgrades it to X+1,
// refuses bad images, rolls back by hand, falls back from a broken version on its own, upgrades
// without --preserve and resets it.
func TestUpgradeEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two node binaries")
	}

	binX := testenv.MachinedVersion(t, vX)
	im := makeImages(t, "")
	dir, good, brokenImg, foreign, tampered := im.dir, im.good, im.broken, im.foreign, im.tampered

	state := t.TempDir()
	cfg := filepath.Join(dir, "worker.yaml")
	testenv.WriteFile(t, cfg, string(testenv.Config(t, machinetype.TypeWorker, "127.5.8.2")), 0o600)

	n := startBootNode(t, binX, state, "--image-keys", im.pub, "--boot-timeout", "2m",
		"--platform", "container", "--address", "127.5.8.2", "--config", cfg)

	n.waitSettled(t, vX)

	if s := slotOf(t, n); s != slots.A {
		t.Fatalf("first boot from slot %q, want A", s)
	}

	marker := filepath.Join(state, "EPHEMERAL", "lib", "marker")
	testenv.WriteFile(t, marker, "keep me", 0o600)

	// Refused images: clear errors, and the node is untouched (no slot B, same version).
	for _, tc := range []struct {
		name, image, want string
		code              codes.Code
	}{
		{"foreign key", foreign, "does not verify with any trusted key", codes.InvalidArgument},
		{"tampered", tampered, "image", codes.InvalidArgument},
		{"missing", filepath.Join(dir, "nope.img"), "no such file", codes.NotFound},
		{"relative path", "good.img", "absolute path", codes.InvalidArgument},
	} {
		err := n.upgrade(t, tc.image, true)
		if status.Code(err) != tc.code || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s: got %v, want %v with %q", tc.name, err, tc.code, tc.want)
		}
	}

	if bootloader.SlotInstalled(filepath.Join(state, "BOOT"), slots.B) {
		t.Fatal("a refused image was written to slot B")
	}

	if v, err := n.version(t); err != nil || v != vX {
		t.Fatalf("after refused images: version %q %v", v, err)
	}

	var err error

	// X -> X+1 with --preserve.
	if err = n.upgrade(t, good, true); err != nil {
		t.Fatal(err)
	}

	n.waitSettled(t, vX1)

	if v := n.meta(t); v[meta.ActiveSlot] != slots.B || v[meta.UpgradeFrom] != vX || v[meta.UpgradeTo] != vX1 || v[meta.Fallback] != "" {
		t.Fatalf("META after upgrade: %v\n%s", v, n.out)
	}

	if b, err := os.ReadFile(marker); err != nil || string(b) != "keep me" {
		t.Fatalf("--preserve lost EPHEMERAL data: %q %v", b, err)
	}

	// Manual rollback to X, with talosctl.
	n.talosctl(t, "rollback")

	n.waitSettled(t, vX)

	if s := slotOf(t, n); s != slots.A {
		t.Fatalf("after rollback slot %q, want A", s)
	}

	// A broken version (it exits at once) falls back to X on its own.
	if err = n.upgrade(t, brokenImg, true); err != nil {
		t.Fatal(err)
	}

	n.waitFor(t, "fallback from the broken version", func() (bool, string) {
		v := n.meta(t)

		return v[meta.Fallback] != "" && v[meta.TrialSlot] == "", fmt.Sprint(v)
	})
	n.waitSettled(t, vX)

	if v := n.meta(t); v[meta.ActiveSlot] != slots.A || !strings.Contains(v[meta.Fallback], "did not report a successful boot") {
		t.Fatalf("META after fallback: %v", v)
	}

	if !strings.Contains(n.out.String(), "broken machined") {
		t.Fatalf("the broken version never ran\n%s", n.out)
	}

	// Staged upgrade: nothing happens until the next reboot.
	if out := n.talosctl(t, "upgrade", "--image", good, "--preserve", "--stage"); !strings.Contains(out, "staged") {
		t.Fatalf("staged upgrade output %q", out)
	}

	n.waitFor(t, "upgrade staged", func() (bool, string) {
		v := n.meta(t)

		return v[meta.BootOnce] == slots.B, fmt.Sprint(v)
	})

	if v, err := n.version(t); err != nil || v != vX {
		t.Fatalf("staged upgrade changed the running version: %q %v", v, err)
	}

	n.talosctl(t, "reboot", "--wait=false")
	n.waitSettled(t, vX1)
	n.talosctl(t, "rollback")
	n.waitSettled(t, vX)

	// X -> X+1 without --preserve (with talosctl): EPHEMERAL is wiped.
	// --wait (the default) returns once the new slot is permanent, not when it first runs: a
	// crash before that would boot X again.
	var stdout, stderr bytes.Buffer
	if code := talosctl.Execute([]string{"--machined-socket", n.socket(), "upgrade", "--image", good, "--timeout", "3m"}, &stdout, &stderr); code != 0 ||
		!strings.Contains(stdout.String(), "upgrading to "+vX1) || !strings.Contains(stderr.String(), vX1+" is permanent") {
		t.Fatalf("upgrade: exit %d\n%s%s", code, stdout.String(), stderr.String())
	}

	if v := n.meta(t); v[meta.TrialSlot] != "" {
		t.Fatalf("upgrade --wait returned with slot %s still on trial: %v", v[meta.TrialSlot], v)
	}

	n.waitSettled(t, vX1)

	if _, err = os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("upgrade without --preserve kept EPHEMERAL data: %v", err)
	}

	// An upgrade to the version the node already runs still installs and restarts it: --wait
	// returns only after the restart (it used to return at once, seeing the version it asked
	// for before the node had gone down).
	before := n.started(t)

	stdout.Reset()
	stderr.Reset()

	if code := talosctl.Execute([]string{"--machined-socket", n.socket(), "upgrade", "--image", good, "--preserve", "--timeout", "3m"}, &stdout, &stderr); code != 0 ||
		!strings.Contains(stderr.String(), vX1+" is permanent") {
		t.Fatalf("upgrade to the running version: exit %d\n%s%s", code, stdout.String(), stderr.String())
	}

	if n.started(t).Equal(before) {
		t.Fatalf("upgrade --wait to the running version %s returned before the node restarted:\n%s", vX1, stderr.String())
	}

	n.waitSettled(t, vX1)

	// Reset: a bad request changes nothing; then wipe STATE and EPHEMERAL and power off.
	c := n.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)

	defer cancel()

	_, err = c.ResetGenericWithResponse(ctx, &machine.ResetRequest{SystemPartitionsToWipe: []*machine.ResetPartitionSpec{{Label: "BOOT", Wipe: true}}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "STATE and/or EPHEMERAL") {
		t.Fatalf("reset of BOOT: %v", err)
	}

	if _, err = os.Stat(filepath.Join(state, "STATE", "config.yaml")); err != nil {
		t.Fatalf("refused reset changed STATE: %v", err)
	}

	testenv.WriteFile(t, marker, "wipe me", 0o600)

	if _, err = c.ResetGenericWithResponse(ctx, &machine.ResetRequest{Graceful: true, Reboot: false}); err != nil {
		t.Fatal(err)
	}

	c.Close()

	select {
	case err = <-n.exited:
		n.exited <- err
		if err != nil {
			t.Fatalf("boot stage after reset: %v\n%s", err, n.out)
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("node did not power off after reset\n%s", n.out)
	}

	for _, p := range []string{filepath.Join(state, "STATE", "config.yaml"), marker} {
		if _, err = os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("reset kept %s: %v", p, err)
		}
	}

	if !bootloader.SlotInstalled(filepath.Join(state, "BOOT"), slots.B) {
		t.Fatal("reset wiped the installed system")
	}
}
