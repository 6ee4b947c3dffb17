package machined_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	machinetype "github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/talos-go/talos/internal/testenv"
)

// invalidConfig breaks the control plane endpoint, which validation must catch.
func invalidConfig(valid []byte) []byte {
	return regexp.MustCompile(`endpoint: https://([0-9.]+):6443`).ReplaceAll(valid, []byte("endpoint: $1"))
}

func waitHostname(ctx context.Context, t *testing.T, c *client.Client, pred func(string) bool) string {
	t.Helper()

	for {
		res, err := safe.StateGetByID[*network.HostnameStatus](ctx, c.COSI, network.HostnameID)
		if err == nil && pred(res.TypedSpec().Hostname) {
			return res.TypedSpec().Hostname
		}

		select {
		case <-ctx.Done():
			t.Fatalf("hostname did not settle: last error %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func TestMaintenanceApplyAndAPI(t *testing.T) {
	testenv.MachinedBinary(t) // built before the deadline starts
	ctx := testenv.Context(t, 3*time.Minute)
	n := testenv.StartNode(t, "127.5.1.2", nil)
	c := n.Client(t)

	// Maintenance mode: the API answers, there is no config.
	ver, err := c.Version(ctx)
	if err != nil {
		t.Fatal(err)
	}

	if ver.Messages[0].Platform.Name != "container" || ver.Messages[0].Version.Tag == "" {
		t.Fatalf("unexpected version %+v", ver.Messages[0])
	}

	if _, err = os.Stat(filepath.Join(n.State, "STATE", "config.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("maintenance node has a config: %v", err)
	}

	valid := testenv.Config(t, machinetype.TypeControlPlane, "127.5.1.2")

	// An invalid config is refused with the field, and changes nothing.
	_, err = c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: invalidConfig(valid)})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "endpoint") {
		t.Fatalf("invalid config: want InvalidArgument naming the endpoint, got %v", err)
	}

	if _, err = os.Stat(filepath.Join(n.State, "STATE", "config.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("a refused config was written")
	}

	_, err = c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: []byte("not: [yaml")})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("garbage config: want InvalidArgument, got %v", err)
	}

	// A valid config completes the boot.
	if _, err = c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: valid}); err != nil {
		t.Fatal(err)
	}

	// A generated hostname exists in maintenance mode too: wait for the config itself.
	n.WaitConfigured(t, c)

	hostname := waitHostname(ctx, t, c, func(h string) bool { return strings.HasPrefix(h, "talos-") })

	resp, err := c.MachineClient.Hostname(ctx, &emptypb.Empty{})
	if err != nil || resp.Messages[0].Hostname != hostname || resp.Messages[0].Metadata.Hostname != hostname {
		t.Fatalf("Hostname: %v %v (want %s)", resp, err, hostname)
	}

	mt, err := safe.StateGetByID[*config.MachineType](ctx, c.COSI, config.MachineTypeID)
	if err != nil || mt.MachineType() != machinetype.TypeControlPlane {
		t.Fatalf("machine type: %v %v", mt, err)
	}

	addrs, err := safe.StateGetByID[*network.NodeAddress](ctx, c.COSI, network.NodeAddressDefaultID)
	if err != nil || len(addrs.TypedSpec().Addresses) != 1 || addrs.TypedSpec().Addresses[0].Addr().String() != "127.5.1.2" {
		t.Fatalf("node addresses: %v %v", addrs, err)
	}

	// Writes through the State API are refused.
	if err = c.COSI.Destroy(ctx, mt.Metadata()); err == nil || !strings.Contains(err.Error(), "PermissionDenied") {
		t.Fatalf("resource write through the API: want PermissionDenied, got %v", err)
	}

	mem, err := c.Memory(ctx)
	if err != nil || mem.Messages[0].Meminfo.Memtotal == 0 || mem.Messages[0].Meminfo.Memavailable == 0 {
		t.Fatalf("Memory: %v %v", mem, err)
	}

	procs, err := c.Processes(ctx)
	if err != nil {
		t.Fatal(err)
	}

	found := false
	for _, p := range procs.Messages[0].Processes {
		found = found || int(p.Pid) == n.Cmd.Process.Pid
	}

	if !found {
		t.Fatalf("Processes does not list machined (pid %d)", n.Cmd.Process.Pid)
	}

	for _, call := range []func(context.Context) error{
		func(ctx context.Context) error { _, err := c.MachineClient.LoadAvg(ctx, &emptypb.Empty{}); return err },
		func(ctx context.Context) error { _, err := c.MachineClient.CPUInfo(ctx, &emptypb.Empty{}); return err },
		func(ctx context.Context) error {
			_, err := c.MachineClient.SystemStat(ctx, &emptypb.Empty{})
			return err
		},
		func(ctx context.Context) error {
			m, err := c.Mounts(ctx)
			if err == nil && len(m.Messages[0].Stats) != 4 {
				err = errors.New("want 4 node partitions in container mode")
			}
			return err
		},
	} {
		if err = call(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// Logs: machined's own log has the boot in it (its last line comes after the config loads).
	var logText bytes.Buffer

	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		logs, err := c.Logs(ctx, "system", 0, "machined", false, 50)
		if err != nil {
			t.Fatal(err)
		}

		logText.Reset()

		for {
			d, err := logs.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			logText.Write(d.Bytes)
		}

		if strings.Contains(logText.String(), "node is running") {
			break
		}

		if time.Now().After(deadline) {
			t.Fatalf("machined log lacks the boot: %q", logText.String())
		}
	}

	// ls and read through the node's paths.
	ls, err := c.LS(ctx, &machine.ListRequest{Root: "/var/log"})
	if err != nil {
		t.Fatal(err)
	}

	var names []string
	for {
		fi, err := ls.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, fi.Name)
	}

	if !strings.Contains(strings.Join(names, " "), "/var/log/machined.log") {
		t.Fatalf("ls /var/log: %v", names)
	}

	rd, err := c.Read(ctx, "/var/log/machined.log")
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(rd)
	rd.Close()

	if !bytes.Contains(data, []byte("node is running")) {
		t.Fatal("read /var/log/machined.log lacks the boot")
	}

	if _, err = c.Read(ctx, "/etc/passwd"); err == nil {
		rd2, _ := c.Read(ctx, "/etc/passwd")
		if _, err = io.ReadAll(rd2); err == nil {
			t.Fatal("container-mode node read a host file outside its state folder")
		}
	}

	// Events: the boot sequence is in the tail.
	var sawBoot bool

	stream, err := c.MachineClient.Events(ctx, &machine.EventsRequest{TailEvents: -1})
	if err != nil {
		t.Fatal(err)
	}

	for !sawBoot {
		ev, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}

		// Decoded as Talos's clients decode events: by the talos/runtime/ type URL.
		decoded, err := client.UnmarshalEvent(ev)
		if err != nil {
			t.Fatalf("event %s: %v", ev.GetData().GetTypeUrl(), err)
		}

		if seq, ok := decoded.Payload.(*machine.SequenceEvent); ok {
			sawBoot = seq.Sequence == "boot" && seq.Action == machine.SequenceEvent_STOP
		}
	}

	// Container mode has a boot ID of its own, new at every start, for `reboot --wait`.
	bootRd, err := c.Read(ctx, "/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Fatal(err)
	}

	bootID, err := io.ReadAll(bootRd)
	if err != nil || len(strings.TrimSpace(string(bootID))) != 36 {
		t.Fatalf("boot id %q: %v", bootID, err)
	}
}

func TestApplyModes(t *testing.T) {
	testenv.MachinedBinary(t) // built before the deadline starts
	ctx := testenv.Context(t, 3*time.Minute)
	valid := testenv.Config(t, machinetype.TypeWorker, "127.5.1.3")
	n := testenv.StartNode(t, "127.5.1.3", valid)
	c := n.Client(t)

	// The hostname is generated before the config loads: wait for the config itself.
	n.WaitConfigured(t, c)

	withHostname := func(name string) []byte {
		return bytes.Replace(valid, []byte("network: {}"), []byte("network:\n        hostname: "+name), 1)
	}

	if bytes.Equal(withHostname("x"), valid) {
		t.Fatal("test config has no `network: {}` to patch")
	}

	// Dry run: a diff, nothing applied.
	resp, err := c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: withHostname("dry"), DryRun: true, Mode: machine.ApplyConfigurationRequest_AUTO})
	if err != nil || !strings.Contains(resp.Messages[0].ModeDetails, "dry") {
		t.Fatalf("dry run: %v %v", resp, err)
	}

	// No-reboot: the hostname follows.
	if _, err = c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: withHostname("applied"), Mode: machine.ApplyConfigurationRequest_NO_REBOOT}); err != nil {
		t.Fatal(err)
	}

	waitHostname(ctx, t, c, func(h string) bool { return h == "applied" })

	// Try: applied now, reverted after the timeout.
	if _, err = c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{
		Data: withHostname("trying"), Mode: machine.ApplyConfigurationRequest_TRY, TryModeTimeout: durationpb.New(5 * time.Second),
	}); err != nil {
		t.Fatal(err)
	}

	waitHostname(ctx, t, c, func(h string) bool { return h == "trying" })
	waitHostname(ctx, t, c, func(h string) bool { return h == "applied" })

	try := func(name string, timeout time.Duration) {
		t.Helper()

		if _, err := c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{
			Data: withHostname(name), Mode: machine.ApplyConfigurationRequest_TRY, TryModeTimeout: durationpb.New(timeout),
		}); err != nil {
			t.Fatal(err)
		}
	}

	// A second try replaces the first: the first one's timeout does not revert it.
	try("first", time.Second)
	try("second", time.Minute)
	time.Sleep(2 * time.Second) // past the first one's timeout
	waitHostname(ctx, t, c, func(h string) bool { return h == "second" })

	// A new apply ends the pending try.
	if _, err = c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: withHostname("applied"), Mode: machine.ApplyConfigurationRequest_NO_REBOOT}); err != nil {
		t.Fatal(err)
	}

	waitHostname(ctx, t, c, func(h string) bool { return h == "applied" })

	// A staged config does not end a try: the try still reverts to the saved config.
	try("tried", time.Second)

	if _, err = c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: withHostname("staged"), Mode: machine.ApplyConfigurationRequest_STAGED}); err != nil {
		t.Fatal(err)
	}

	waitHostname(ctx, t, c, func(h string) bool { return h == "applied" })

	// A change that needs a reboot is refused in no-reboot mode, and nothing changes.
	otherType := testenv.Config(t, machinetype.TypeWorker, "127.5.1.3") // new secrets: new token and CA
	if _, err = c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: otherType, Mode: machine.ApplyConfigurationRequest_NO_REBOOT}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("no-reboot with a reboot-only change: want FailedPrecondition, got %v", err)
	}

	// Staged: saved for the next boot; the running config stays.
	if _, err = c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: withHostname("staged"), Mode: machine.ApplyConfigurationRequest_STAGED}); err != nil {
		t.Fatal(err)
	}

	time.Sleep(200 * time.Millisecond)
	waitHostname(ctx, t, c, func(h string) bool { return h == "applied" })

	// Reboot: the process restarts in place and boots with the staged config.
	pid := n.Cmd.Process.Pid

	if err = c.Reboot(ctx); err != nil {
		t.Fatal(err)
	}

	c = rebootedClient(ctx, t, n)
	waitHostname(ctx, t, c, func(h string) bool { return h == "staged" })

	if n.Cmd.Process.Pid != pid {
		t.Fatal("pid changed across a container-mode reboot")
	}

	// Shutdown: the process exits cleanly.
	if err = c.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	select {
	case err := <-n.Exited:
		n.Exited <- err
		if err != nil {
			t.Fatalf("shutdown exit: %v\n%s", err, n.Output)
		}
	case <-ctx.Done():
		t.Fatal("node did not exit after Shutdown")
	}
}

// rebootedClient waits for the node to come back from a reboot and connects again.
func rebootedClient(ctx context.Context, t *testing.T, n *testenv.Node) *client.Client {
	t.Helper()

	for {
		c := n.Client(t)

		// The socket may still be the old one for a moment: wait for a fresh boot.
		if _, err := c.Version(ctx); err == nil {
			if st, err := safe.StateGetByID[*network.HostnameStatus](ctx, c.COSI, network.HostnameID); err == nil && st != nil {
				return c
			}
		}

		select {
		case <-ctx.Done():
			t.Fatalf("node did not come back after reboot\n%s", n.Output)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func TestInvalidConfigFlagRefused(t *testing.T) {
	valid := testenv.Config(t, machinetype.TypeWorker, "127.5.1.4")
	n := testenv.StartNode(t, "127.5.1.4", invalidConfig(valid))

	select {
	case err := <-n.Exited:
		n.Exited <- err
		if err == nil {
			t.Fatal("machined accepted an invalid --config")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("machined did not refuse an invalid --config")
	}

	if !strings.Contains(n.Output.String(), "endpoint") {
		t.Fatalf("error does not name the field:\n%s", n.Output)
	}

	if _, err := os.Stat(filepath.Join(n.State, "STATE", "config.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("an invalid config was saved")
	}
}

func TestSecondMachinedOnSameStateRefused(t *testing.T) {
	n := testenv.StartNode(t, "127.5.1.5", nil)
	n.Client(t)

	second := testenv.StartNodeArgs(t, n.State, "--platform", "container", "--state", n.State, "--address", "127.5.1.6")

	select {
	case err := <-second.Exited:
		second.Exited <- err
		if err == nil || !strings.Contains(second.Output.String(), "another machined") {
			t.Fatalf("second machined: %v %s", err, second.Output)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("second machined on the same state folder kept running")
	}
}
