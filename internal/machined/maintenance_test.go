package machined_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"strings"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	machinetype "github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/siderolabs/talos/pkg/machinery/resources/v1alpha1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/talos-go/talos/internal/testenv"
)

// TestMaintenanceOverNetwork: a node without a config serves the maintenance API on :50000
// (no client certificate); a config applied there boots the node and mTLS apid takes over.
func TestMaintenanceOverNetwork(t *testing.T) {
	testenv.MachinedBinary(t) // built before the deadline starts
	ctx := testenv.Context(t, 3*time.Minute)
	const addr = "127.5.1.7"

	n := testenv.StartNode(t, addr, nil)
	n.Client(t) // wait for the boot to reach maintenance

	insecure := func() *client.Client {
		c, err := client.New(ctx,
			client.WithTLSConfig(&tls.Config{InsecureSkipVerify: true}),
			client.WithEndpoints(addr))
		if err != nil {
			t.Fatal(err)
		}

		t.Cleanup(func() { c.Close() })

		return c
	}

	c := insecure()

	// The listener comes up after the socket: wait for it (WaitForReady rides out the
	// client's reconnect backoff).
	var err error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		vctx, vcancel := context.WithTimeout(ctx, time.Second)
		_, err = c.MachineClient.Version(vctx, &emptypb.Empty{}, grpc.WaitForReady(true))

		vcancel()

		if err == nil {
			break
		}
	}

	if err != nil {
		t.Fatalf("maintenance Version: %v", err)
	}

	if _, err = c.MachineClient.Memory(ctx, &emptypb.Empty{}); status.Code(err) != codes.Unimplemented && status.Code(err) != codes.PermissionDenied {
		t.Fatalf("maintenance must not serve Memory: %v", err)
	}

	// Hardware, disks and network can be read before there is a config, as on Talos
	// (`talosctl get systeminformation|cpus|disks --insecure`); other resources cannot.
	if _, err = safe.StateGetByID[*hardware.SystemInformation](ctx, c.COSI, hardware.SystemInformationID); err != nil {
		t.Fatalf("maintenance systeminformation: %v", err)
	}

	if cpu, err := safe.StateGetByID[*hardware.Processor](ctx, c.COSI, "CPU_0"); err != nil || cpu.TypedSpec().ThreadCount == 0 {
		t.Fatalf("maintenance CPU_0: %v", err)
	}

	if _, err = safe.StateListAll[*block.Disk](ctx, c.COSI); err != nil {
		t.Fatalf("maintenance disks: %v", err)
	}

	if _, err = safe.StateListAll[*v1alpha1.Service](ctx, c.COSI); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("maintenance must not list services: %v", err)
	}

	valid := testenv.Config(t, machinetype.TypeControlPlane, addr)
	if _, err = c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: invalidConfig(valid)}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("invalid config through maintenance: %v", err)
	}

	checkMaintenanceAsUpstream(ctx, t, c, valid)

	if _, err = c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: valid}); err != nil {
		t.Fatal(err)
	}

	// apid takes over: a caller without a client certificate is refused from now on.
	deadline := time.Now().Add(30 * time.Second)

	for {
		_, err = insecure().Version(ctx)
		if err != nil && !strings.Contains(err.Error(), "connection refused") {
			break
		}

		if time.Now().After(deadline) {
			t.Fatalf("maintenance API still answers without a client certificate after apply: %v", err)
		}

		time.Sleep(100 * time.Millisecond)
	}

	// With a config, GenerateConfiguration makes join configs with the node's own secrets.
	gen, err := n.Client(t).GenerateConfiguration(ctx, generateRequest(machine.MachineConfig_TYPE_WORKER))
	if err != nil {
		t.Fatalf("GenerateConfiguration of a worker on a configured node: %v", err)
	}

	joined, err := configloader.NewFromBytes(gen.Messages[0].Data[0])
	if err != nil {
		t.Fatal(err)
	}

	own, _ := configloader.NewFromBytes(valid)
	if !bytes.Equal(joined.Machine().Security().IssuingCA().Crt, own.Machine().Security().IssuingCA().Crt) || joined.Machine().Type() != machinetype.TypeWorker {
		t.Errorf("the generated worker config does not join this node's cluster (type %s)", joined.Machine().Type())
	}
}

func generateRequest(typ machine.MachineConfig_MachineType) *machine.GenerateConfigurationRequest {
	return &machine.GenerateConfigurationRequest{
		ClusterConfig: &machine.ClusterConfig{Name: "gen", ControlPlane: &machine.ControlPlaneConfig{Endpoint: "https://10.9.8.7:6443"}},
		MachineConfig: &machine.MachineConfig{Type: typ},
	}
}

// checkMaintenanceAsUpstream: what upstream's maintenance API serves and refuses, with the
// node still waiting for a config after each call.
func checkMaintenanceAsUpstream(ctx context.Context, t *testing.T, c *client.Client, valid []byte) {
	t.Helper()

	// A config that would keep a running one has nothing to keep: refused, nothing applied.
	for _, mode := range []machine.ApplyConfigurationRequest_Mode{machine.ApplyConfigurationRequest_NO_REBOOT, machine.ApplyConfigurationRequest_STAGED} {
		if _, err := c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: valid, Mode: mode}); status.Code(err) != codes.Unimplemented {
			t.Errorf("apply --mode %s in maintenance: want Unimplemented, got %v", mode, err)
		}
	}

	if _, err := c.GenerateConfiguration(ctx, generateRequest(machine.MachineConfig_TYPE_WORKER)); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("a worker config in maintenance: want FailedPrecondition, got %v", err)
	}

	gen, err := c.GenerateConfiguration(ctx, generateRequest(machine.MachineConfig_TYPE_CONTROL_PLANE))
	if err != nil {
		t.Fatalf("GenerateConfiguration of a control plane in maintenance: %v", err)
	}

	cfg, err := configloader.NewFromBytes(gen.Messages[0].Data[0])
	if err != nil || cfg.Cluster().Name() != "gen" || cfg.Cluster().Endpoint().String() != "https://10.9.8.7:6443" {
		t.Errorf("generated config: %v", err)
	}

	if !strings.Contains(string(gen.Messages[0].Talosconfig), "10.9.8.7") {
		t.Errorf("the talosconfig does not reach the endpoint:\n%s", gen.Messages[0].Talosconfig)
	}

	if _, err = c.GenerateClientConfiguration(ctx, &machine.GenerateClientConfigurationRequest{}); status.Code(err) != codes.Unimplemented {
		t.Errorf("GenerateClientConfiguration in maintenance: %v", err)
	}

	if _, err = c.UpgradeWithOptions(ctx, client.WithUpgradeImage("/nonexistent.img"), client.WithUpgradePreserve(true)); status.Code(err) != codes.Unimplemented {
		t.Errorf("upgrade --preserve in maintenance: want Unimplemented, got %v", err)
	}

	// machined answers a plain upgrade itself: this node has no A/B slots, nothing installed.
	if _, err = c.UpgradeWithOptions(ctx, client.WithUpgradeImage("/nonexistent.img")); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("upgrade in maintenance of a node with no slots: want FailedPrecondition, got %v", err)
	}

	if err = c.ResetGeneric(ctx, &machine.ResetRequest{SystemPartitionsToWipe: []*machine.ResetPartitionSpec{{Label: "STATE", Wipe: true}}}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("reset of single partitions in maintenance: want InvalidArgument, got %v", err)
	}

	// META keys are resources too (`get metakeys`), readable before a config.
	if err = c.MetaWrite(ctx, 0x0b, []byte("next-boot")); err != nil {
		t.Fatal(err)
	}

	key, err := safe.StateGetByID[*runtimeres.MetaKey](ctx, c.COSI, runtimeres.MetaKeyTagToID(0x0b))
	if err != nil || key.TypedSpec().Value != "next-boot" {
		t.Errorf("MetaKey 0x0b after a write: %v", err)
	}

	if err = c.MetaDelete(ctx, 0x0b); err != nil {
		t.Fatal(err)
	}

	if _, err = safe.StateGetByID[*runtimeres.MetaKey](ctx, c.COSI, runtimeres.MetaKeyTagToID(0x0b)); status.Code(err) != codes.NotFound && !state.IsNotFoundError(err) {
		t.Errorf("MetaKey 0x0b after its delete: %v", err)
	}
}
