package machined_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	machinetype "github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/talos-go/talos/internal/machined/runtime"
	"github.com/talos-go/talos/internal/talosctl"
	"github.com/talos-go/talos/internal/testenv"
)

// watchdogOnly is the config a user applied to a control plane: accepted, it left the node
// rebooting into a boot that never served apid again.
const watchdogOnly = "apiVersion: v1alpha1\nkind: WatchdogTimerConfig\ndevice: /dev/watchdog0\ntimeout: 2m\n"

// deleteV1Alpha1 is the `talosctl patch` that deletes what makes the v1alpha1 document.
const deleteV1Alpha1 = "machine:\n  $patch: delete\ncluster:\n  $patch: delete\n"

var allModes = []machine.ApplyConfigurationRequest_Mode{
	machine.ApplyConfigurationRequest_AUTO, machine.ApplyConfigurationRequest_NO_REBOOT,
	machine.ApplyConfigurationRequest_REBOOT, machine.ApplyConfigurationRequest_STAGED,
	machine.ApplyConfigurationRequest_TRY,
}

// refusedIncomplete fails t unless err is InvalidArgument saying what is missing and the fix.
func refusedIncomplete(t *testing.T, what string, err error, missing string) {
	t.Helper()

	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), missing) ||
		!strings.Contains(err.Error(), runtime.ErrIncomplete.Error()) {
		t.Errorf("%s: want InvalidArgument naming %q and the fix, got %v", what, missing, err)
	}
}

// nodeState is what must not change when a config is refused.
type nodeState struct {
	saved, served []byte // STATE/config.yaml; `get machineconfig`
	version       string // the MachineConfig resource's version
	bootID        string
}

func readNodeState(ctx context.Context, t *testing.T, n *testenv.Node, c *client.Client) nodeState {
	t.Helper()

	saved, err := os.ReadFile(filepath.Join(n.State, "STATE", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}

	mc, err := safe.StateGetByID[*config.MachineConfig](ctx, c.COSI, config.ActiveID)
	if err != nil {
		t.Fatal(err)
	}

	served, err := mc.Provider().Bytes()
	if err != nil {
		t.Fatal(err)
	}

	bootID, err := os.ReadFile(filepath.Join(n.State, "system", "run", "boot_id"))
	if err != nil {
		t.Fatal(err)
	}

	return nodeState{saved: saved, served: served, version: mc.Metadata().Version().String(), bootID: string(bootID)}
}

// TestIncompleteConfigRefused: a running control plane refuses a config without the v1alpha1
// document in every apply mode, with --dry-run, and through `talosctl patch` and `edit`; it
// keeps its config, its boot, its services and apid.
func TestIncompleteConfigRefused(t *testing.T) {
	testenv.MachinedBinary(t) // built before the deadline starts
	testenv.EtcdNextToMachined(t)

	ctx := testenv.Context(t, 4*time.Minute)

	const addr = "127.5.1.10"

	// An extra document, so that deleting machine: and cluster: leaves a loadable config.
	cfg := append(testenv.Config(t, machinetype.TypeControlPlane, addr), "---\napiVersion: v1alpha1\nkind: NetworkDefaultActionConfig\ningress: accept\n"...)
	n := testenv.StartNode(t, addr, cfg)
	c := n.Client(t)
	n.WaitConfigured(t, c)

	apid := apidClient(ctx, t, c, addr)
	waitServicesRunning(t, c, "apid", "trustd", "etcd")

	before := readNodeState(ctx, t, n, c)

	for _, mode := range allModes {
		for _, dry := range []bool{false, true} {
			_, err := c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{
				Data: []byte(watchdogOnly), Mode: mode, DryRun: dry, TryModeTimeout: durationpb.New(5 * time.Second),
			})
			refusedIncomplete(t, "apply-config --mode "+mode.String()+map[bool]string{true: " --dry-run"}[dry], err, "has no v1alpha1 document")
		}
	}

	// talosctl patch and edit, as a user runs them (in process, on the node's socket).
	isolateTalosctl(t)

	sock := []string{"--machined-socket", n.Socket()}

	for _, extra := range [][]string{nil, {"--dry-run"}, {"--mode", "reboot"}} {
		args := append(append(append([]string{}, sock...), "patch", "mc", "--patch", deleteV1Alpha1), extra...)
		if code, stderr := runTalosctl(args...); code == 0 || !strings.Contains(stderr, "InvalidArgument") ||
			!strings.Contains(stderr, "has no machine: section") || !strings.Contains(stderr, runtime.ErrIncomplete.Error()) {
			t.Errorf("talosctl %v: want refused with the reason, got exit %d:\n%s", args, code, stderr)
		}
	}

	editor := filepath.Join(t.TempDir(), "editor.sh")
	testenv.WriteFile(t, editor, "#!/bin/sh\nprintf '%s' '"+watchdogOnly+"' > \"$1\"\n", 0o700)
	t.Setenv("TALOS_EDITOR", editor)

	if code, stderr := runTalosctl(append(sock, "edit", "mc")...); code == 0 || !strings.Contains(stderr, "has no v1alpha1 document") {
		t.Errorf("talosctl edit to a WatchdogTimerConfig alone: want refused with the reason, got exit %d:\n%s", code, stderr)
	}

	// A refused reboot, staged or try config would show by now: a new boot, a staged file, a
	// changed config, a service stopped.
	time.Sleep(3 * time.Second)

	after := readNodeState(ctx, t, n, c)
	if !bytes.Equal(after.saved, before.saved) || !bytes.Equal(after.served, before.served) || after.version != before.version {
		t.Errorf("the config changed: saved equal %v, served equal %v, version %s -> %s",
			bytes.Equal(after.saved, before.saved), bytes.Equal(after.served, before.served), before.version, after.version)
	}

	if after.bootID != before.bootID {
		t.Errorf("the node rebooted: boot id %q -> %q", before.bootID, after.bootID)
	}

	if _, err := os.Stat(filepath.Join(n.State, "STATE", "config.staged.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a config was staged: %v", err)
	}

	waitServicesRunning(t, c, "apid", "trustd", "etcd")

	if _, err := apid.Version(ctx); err != nil {
		t.Errorf("apid stopped answering: %v", err)
	}
}

// TestIncompleteConfigRefusedInMaintenance: a node without a config refuses one without the
// v1alpha1 document over the maintenance API, and still waits for a config.
func TestIncompleteConfigRefusedInMaintenance(t *testing.T) {
	testenv.MachinedBinary(t)

	ctx := testenv.Context(t, 2*time.Minute)

	const addr = "127.5.1.11"

	n := testenv.StartNode(t, addr, nil)
	n.Client(t)

	c := maintenanceClient(ctx, t, addr)

	for _, mode := range []machine.ApplyConfigurationRequest_Mode{machine.ApplyConfigurationRequest_AUTO, machine.ApplyConfigurationRequest_REBOOT, machine.ApplyConfigurationRequest_TRY} {
		for _, dry := range []bool{false, true} {
			_, err := c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: []byte(watchdogOnly), Mode: mode, DryRun: dry})
			refusedIncomplete(t, "maintenance apply-config --mode "+mode.String()+map[bool]string{true: " --dry-run"}[dry], err, "has no v1alpha1 document")
		}
	}

	if _, err := os.Stat(filepath.Join(n.State, "STATE", "config.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused config was saved: %v", err)
	}

	// Still in maintenance: a whole config is taken.
	if _, err := c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: testenv.Config(t, machinetype.TypeWorker, addr)}); err != nil {
		t.Fatalf("a whole config after the refusal: %v", err)
	}
}

// TestIncompleteConfigAtBoot: a config without the v1alpha1 document given at boot is refused
// as other invalid configs are: --config and a saved config stop machined with the reason
// (on metal, on the console); a staged one is dropped for the saved config, with the reason
// in the log.
func TestIncompleteConfigAtBoot(t *testing.T) {
	testenv.MachinedBinary(t)

	exits := func(t *testing.T, n *testenv.Node, want string) {
		t.Helper()

		select {
		case err := <-n.Exited:
			n.Exited <- err
			if err == nil {
				t.Fatal("machined booted with a config without v1alpha1")
			}
		case <-time.After(30 * time.Second):
			t.Fatal("machined did not refuse a config without v1alpha1")
		}

		if out := n.Output.String(); !strings.Contains(out, want) || !strings.Contains(out, runtime.ErrIncomplete.Error()) {
			t.Fatalf("the output does not say why (%q):\n%s", want, out)
		}
	}

	t.Run("--config", func(t *testing.T) {
		n := testenv.StartNode(t, "127.5.1.12", []byte(watchdogOnly))
		exits(t, n, "has no v1alpha1 document")

		if _, err := os.Stat(filepath.Join(n.State, "STATE", "config.yaml")); !errors.Is(err, os.ErrNotExist) {
			t.Error("the refused config was saved")
		}
	})

	t.Run("saved", func(t *testing.T) {
		state := t.TempDir()
		testenv.WriteFile(t, filepath.Join(state, "STATE", "config.yaml"), watchdogOnly, 0o600)

		n := testenv.StartNodeArgs(t, state, "--platform", "container", "--state", state, "--address", "127.5.1.12")
		exits(t, n, "saved config")
	})

	t.Run("staged", func(t *testing.T) {
		const addr = "127.5.1.12"

		state := t.TempDir()
		testenv.WriteFile(t, filepath.Join(state, "STATE", "config.yaml"), string(testenv.Config(t, machinetype.TypeWorker, addr)), 0o600)
		testenv.WriteFile(t, filepath.Join(state, "STATE", "config.staged.yaml"), watchdogOnly, 0o600)

		n := testenv.StartNodeArgs(t, state, "--platform", "container", "--state", state, "--address", addr)
		n.WaitConfigured(t, n.Client(t))

		if out := n.Output.String(); !strings.Contains(out, "staged config refused") || !strings.Contains(out, "has no v1alpha1 document") {
			t.Errorf("the log does not say why the staged config was dropped:\n%s", out)
		}
	})
}

// apidClient connects to the node's apid with a reader certificate the node issues, once apid
// answers.
func apidClient(ctx context.Context, t *testing.T, c *client.Client, addr string) *client.Client {
	t.Helper()

	resp, err := c.GenerateClientConfiguration(ctx, &machine.GenerateClientConfigurationRequest{Roles: []string{"os:reader"}})
	if err != nil {
		t.Fatal(err)
	}

	cfg, err := clientconfig.FromBytes(resp.GetMessages()[0].GetTalosconfig())
	if err != nil {
		t.Fatal(err)
	}

	remote, err := client.New(ctx, client.WithConfig(cfg), client.WithEndpoints(addr))
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { remote.Close() })

	testenv.WaitFor(t, "apid to answer", time.Minute, func() error {
		_, err := remote.Version(ctx)

		return err
	})

	return remote
}

// maintenanceClient connects to the node's maintenance API (no client certificate) once it
// answers.
func maintenanceClient(ctx context.Context, t *testing.T, addr string) *client.Client {
	t.Helper()

	c, err := client.New(ctx, client.WithTLSConfig(&tls.Config{InsecureSkipVerify: true}), client.WithEndpoints(addr))
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { c.Close() })

	testenv.WaitFor(t, "the maintenance API to answer", 30*time.Second, func() error {
		vctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()

		// WaitForReady rides out the client's reconnect backoff while the listener comes up.
		_, err := c.MachineClient.Version(vctx, &emptypb.Empty{}, grpc.WaitForReady(true))

		return err
	})

	return c
}

// waitServicesRunning waits until each named service is Running.
func waitServicesRunning(t *testing.T, c *client.Client, ids ...string) {
	t.Helper()

	testenv.WaitFor(t, "services "+strings.Join(ids, ", ")+" running", time.Minute, func() error {
		resp, err := c.ServiceList(t.Context())
		if err != nil {
			return err
		}

		state := map[string]string{}
		for _, s := range resp.Messages[0].Services {
			state[s.Id] = s.State
		}

		for _, id := range ids {
			if state[id] != "Running" {
				return errors.New(id + " is " + state[id])
			}
		}

		return nil
	})
}

// isolateTalosctl gives in-process talosctl an empty home and keeps its temporary files (an
// edit kept for a retry) in the test's folder.
func isolateTalosctl(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", "")
	t.Setenv("TALOSCONFIG", "")
	t.Setenv("TMPDIR", t.TempDir())
}

func runTalosctl(args ...string) (int, string) {
	var out, errOut bytes.Buffer

	code := talosctl.Execute(args, &out, &errOut)

	return code, out.String() + errOut.String()
}
