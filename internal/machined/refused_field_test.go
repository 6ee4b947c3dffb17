package machined_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	machinetype "github.com/siderolabs/talos/pkg/machinery/config/machine"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/talos-go/talos/internal/testenv"
)

// withKernelModule is a whole config plus a field the node refuses (internal/configsupport).
func withKernelModule(t *testing.T, typ machinetype.Type, addr string) []byte {
	t.Helper()

	cfg := string(testenv.Config(t, typ, addr))
	if !strings.Contains(cfg, "\nmachine:\n") {
		t.Fatal("the test config has no machine: line")
	}

	return []byte(strings.Replace(cfg, "\nmachine:\n", "\nmachine:\n    kernel:\n        modules:\n            - name: btrfs\n", 1))
}

// TestRefusedFieldChangesNothing: a running node refuses a config setting a refused field
// (machine.kernel.modules) in every apply mode, with --dry-run, and through `talosctl patch`,
// with InvalidArgument naming the field as written; its config and boot stay as they were. At
// boot the same config stops machined with the reason.
func TestRefusedFieldChangesNothing(t *testing.T) {
	testenv.MachinedBinary(t)

	ctx := testenv.Context(t, 3*time.Minute)

	const addr = "127.5.1.13"

	n := testenv.StartNode(t, addr, testenv.Config(t, machinetype.TypeWorker, addr))
	c := n.Client(t)
	n.WaitConfigured(t, c)

	before := readNodeState(ctx, t, n, c)
	bad := withKernelModule(t, machinetype.TypeWorker, addr)

	refused := func(what string, err error, text string) {
		t.Helper()

		if status.Code(err) != codes.InvalidArgument && !strings.Contains(text, "InvalidArgument") {
			t.Errorf("%s: want InvalidArgument, got %v %s", what, err, text)
		}

		if msg := text + " " + status.Convert(err).Message(); !strings.Contains(msg, "machine.kernel.modules[0]: ") || !strings.Contains(msg, "(on a process node)") {
			t.Errorf("%s: the refusal does not name machine.kernel.modules[0] and the node kind that refuses it: %v %s", what, err, text)
		}
	}

	for _, mode := range allModes {
		for _, dry := range []bool{false, true} {
			_, err := c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{
				Data: bad, Mode: mode, DryRun: dry, TryModeTimeout: durationpb.New(5 * time.Second),
			})
			refused("apply-config --mode "+mode.String()+map[bool]string{true: " --dry-run"}[dry], err, "")
		}
	}

	isolateTalosctl(t)

	for _, extra := range [][]string{nil, {"--dry-run"}} {
		args := append([]string{"--machined-socket", n.Socket(), "patch", "mc", "--patch", `{"machine": {"kernel": {"modules": [{"name": "btrfs"}]}}}`}, extra...)
		code, stderr := runTalosctl(args...)

		if code == 0 {
			t.Errorf("talosctl %v: accepted", args)
		}

		refused("talosctl patch", nil, stderr)
	}

	time.Sleep(2 * time.Second) // a refused reboot or staged config would show by now

	after := readNodeState(ctx, t, n, c)
	if !bytes.Equal(after.saved, before.saved) || !bytes.Equal(after.served, before.served) || after.version != before.version || after.bootID != before.bootID {
		t.Errorf("the node changed: config version %s -> %s, boot %q -> %q", before.version, after.version, before.bootID, after.bootID)
	}

	if _, err := os.Stat(filepath.Join(n.State, "STATE", "config.staged.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a config was staged: %v", err)
	}

	// At boot: machined refuses the config and says why.
	booted := testenv.StartNode(t, "127.5.1.14", withKernelModule(t, machinetype.TypeWorker, "127.5.1.14"))

	select {
	case err := <-booted.Exited:
		booted.Exited <- err
		if err == nil {
			t.Fatal("machined booted with a refused field")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("machined did not refuse the config at boot")
	}

	if out := booted.Output.String(); !strings.Contains(out, "machine.kernel.modules[0]") {
		t.Errorf("machined's output does not name the refused field:\n%s", out)
	}
}
