package talosctl

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/resources/cri"
	"github.com/siderolabs/talos/pkg/machinery/resources/etcd"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"

	"github.com/talos-go/talos/internal/configsupport"
	"github.com/talos-go/talos/internal/machined/resources"
	"github.com/talos-go/talos/internal/testenv"
)

// processEmpty are the types a ready process control plane registers and leaves empty.
var processEmpty = map[resource.Type]string{
	runtimeres.ExtensionStatusType: "no system extensions",
	runtimeres.MetaKeyType:         "no META key written (upstream's nodes too until one is)",
	runtimeres.KmsgLogConfigType:   "only with a KmsgLogConfig document or talos.logging.kernel",
	runtimeres.EventSinkConfigType: "only with talos.events.sink",
	k8s.NodeAnnotationSpecType:     "only with machine.nodeAnnotations",
	k8s.NodeCordonedSpecType:       "only while the node is cordoned (an upgrade)",
	k8s.NodeTaintSpecType:          "only with machine.nodeTaints: unlike upstream, whose control planes publish their NoSchedule taint here, ours is applied by NodeRoleController",
	cri.SeccompProfileType:         "only with machine.seccompProfiles",
}

// TestIntegrationResourceParity reads every resource a ready process control plane publishes
// through the State API and through `talosctl get -o yaml`, and checks each against machinery
// v1.11.0's definitions (testenv.ResourceParity): machinery's types, valid enums, upstream's
// always-set fields, YAML that parses back.
func TestIntegrationResourceParity(t *testing.T) {
	isolate(t)
	testenv.EtcdNextToMachined(t)

	addr := "127.5.23.5"
	n := testenv.StartNode(t, addr, testenv.Config(t, machine.TypeControlPlane, addr))
	c := n.Client(t)
	n.WaitConfigured(t, c)

	ctx := t.Context()

	testenv.WaitFor(t, "machine status running and ready", 90*time.Second, func() error {
		ms, err := safe.StateGetByID[*runtimeres.MachineStatus](ctx, c.COSI, runtimeres.MachineStatusID)
		if err != nil {
			return err
		}

		if s := ms.TypedSpec(); s.Stage != runtimeres.MachineStageRunning || !s.Status.Ready {
			return fmt.Errorf("stage %s, ready %v, unmet %v", s.Stage, s.Status.Ready, s.Status.UnmetConditions)
		}

		return nil
	})

	// Events carries MachineStatusEvent as upstream's: the running and ready stage is there
	// for a client that waits on the stream.
	machineStatusEventSeen(t, c)

	// A bootstrapped etcd: its member ID is published.
	if err := c.Bootstrap(ctx, &machineapi.BootstrapRequest{}); err != nil {
		t.Fatal(err)
	}

	testenv.WaitFor(t, "etcd member published", 90*time.Second, func() error {
		_, err := safe.StateGetByID[*etcd.Member](ctx, c.COSI, etcd.LocalMemberID)

		return err
	})

	defs := resources.For(configsupport.Process)

	counts := testenv.ResourceParity{
		State: c.COSI,
		YAML: func(typ resource.Type) (string, error) {
			code, out, stderr := run(t, "get", typ, "-o", "yaml", "--machined-socket", n.Socket())
			if code != 0 {
				return out, errors.New(stderr)
			}

			return out, nil
		},
		Empty: processEmpty,
	}.Check(ctx, t, defs)

	t.Logf("process node: %d types registered, %d checked (%d resources, %d enum values, %d required fields), %d excepted",
		counts.Types, counts.Checked, counts.Resources, counts.Enums, counts.Required, counts.Excepted)

	if counts.Checked+counts.Excepted != len(defs) {
		t.Errorf("%d types checked and %d excepted of %d registered", counts.Checked, counts.Excepted, len(defs))
	}
}

// machineStatusEventSeen waits on the Events stream (all remembered events, then new ones) for
// a MachineStatusEvent saying running and ready.
func machineStatusEventSeen(t *testing.T, c *client.Client) {
	t.Helper()

	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()

	ch := make(chan client.EventResult)
	if err := c.EventsWatchV2(ctx, ch, client.WithTailEvents(-1)); err != nil {
		t.Fatal(err)
	}

	for {
		select {
		case <-ctx.Done():
			t.Fatal("no MachineStatusEvent running and ready on the Events stream")
		case res := <-ch:
			if res.Error != nil {
				t.Fatal(res.Error)
			}

			if ev, ok := res.Event.Payload.(*machineapi.MachineStatusEvent); ok &&
				ev.GetStage() == machineapi.MachineStatusEvent_RUNNING && ev.GetStatus().GetReady() {
				return
			}
		}
	}
}
