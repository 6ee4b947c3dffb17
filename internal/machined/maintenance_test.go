package machined_test

import (
	"context"
	"crypto/tls"
	"strings"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	machinetype "github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
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
}
