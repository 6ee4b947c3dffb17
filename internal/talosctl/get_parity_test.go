package talosctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/resources/etcd"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"

	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/talos-go/talos/internal/configsupport"
	"github.com/talos-go/talos/internal/machined/resources"
	"github.com/talos-go/talos/internal/testenv"
)

// processEmpty are the types a ready process control plane registers and leaves empty.
var processEmpty = map[resource.Type]string{
	runtimeres.ExtensionStatusType: "no system extensions",
	runtimeres.KmsgLogConfigType:   "only with a KmsgLogConfig document, which would send the host's kernel log",
	runtimeres.EventSinkConfigType: "only with an EventSinkConfig document, whose sink the node would dial without end",
	k8s.NodeCordonedSpecType:       "only while the node is cordoned (an upgrade)",
}

// parityPatch fills the types a node publishes only when configured.
const parityPatch = `machine:
  nodeAnnotations:
    example.com/parity: "yes"
  nodeTaints:
    example.com/parity: "yes:NoSchedule"
  seccompProfiles:
    - name: parity.json
      value:
        defaultAction: SCMP_ACT_LOG
`

// TestIntegrationResourceParity reads every resource a ready process control plane publishes
// through the State API and through `talosctl get -o yaml`, and checks each against machinery
// v1.11.0's definitions (testenv.ResourceParity): machinery's types, valid enums, upstream's
// always-set fields, YAML that parses back.
func TestIntegrationResourceParity(t *testing.T) {
	isolate(t)
	testenv.EtcdNextToMachined(t)

	addr := "127.5.23.5"
	patches, err := configpatcher.LoadPatches([]string{parityPatch})
	if err != nil {
		t.Fatal(err)
	}

	patched, err := configpatcher.Apply(configpatcher.WithBytes(testenv.Config(t, machine.TypeControlPlane, addr)), patches)
	if err != nil {
		t.Fatal(err)
	}

	cfg, err := patched.Bytes()
	if err != nil {
		t.Fatal(err)
	}

	n := testenv.StartNode(t, addr, cfg)
	c := n.Client(t)
	n.WaitConfigured(t, c)

	ctx := t.Context()

	// A META key, as an install or `talosctl meta write` leaves.
	if err = c.MetaWrite(ctx, 0x0c, []byte("parity")); err != nil {
		t.Fatal(err)
	}

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

	apiAnswersShaped(t, c)

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

// apiAnswersShaped checks the answers upstream's talosctl and health checks read, in
// upstream's shape: each message names its node (metadata.hostname), Version says RBAC,
// every service reports its health with apid, trustd and etcd healthy, EtcdStatus the member,
// Logs exactly the tail asked for, and the stats calls answer per node.
func apiAnswersShaped(t *testing.T, c *client.Client) {
	t.Helper()

	ctx := t.Context()

	hs, err := safe.StateGetByID[*network.HostnameStatus](ctx, c.COSI, network.HostnameID)
	if err != nil {
		t.Fatal(err)
	}

	host := hs.TypedSpec().FQDN()
	named := func(call string, md interface{ GetHostname() string }) {
		t.Helper()

		if md.GetHostname() != host {
			t.Errorf("%s: metadata.hostname %q, want %q", call, md.GetHostname(), host)
		}
	}

	ver, err := c.Version(ctx)
	if err != nil || len(ver.GetMessages()) != 1 {
		t.Fatalf("version: %v (%d messages)", err, len(ver.GetMessages()))
	}

	named("version", ver.GetMessages()[0].GetMetadata())

	if m := ver.GetMessages()[0]; m.GetVersion().GetTag() == "" || !m.GetFeatures().GetRbac() {
		t.Errorf("version: tag %q, features %v: want a tag and RBAC", m.GetVersion().GetTag(), m.GetFeatures())
	}

	testenv.WaitFor(t, "apid, trustd and etcd healthy in ServiceList", 90*time.Second, func() error {
		sl, err := c.ServiceList(ctx)
		if err != nil {
			return fmt.Errorf("service list: %w", err)
		}

		if len(sl.GetMessages()) != 1 {
			return fmt.Errorf("service list: %d messages, want one", len(sl.GetMessages()))
		}

		named("service list", sl.GetMessages()[0].GetMetadata())

		healthy := map[string]bool{}
		for _, svc := range sl.GetMessages()[0].GetServices() {
			if svc.GetId() == "" || svc.GetState() == "" || svc.GetHealth() == nil || len(svc.GetEvents().GetEvents()) == 0 {
				t.Fatalf("service %v: want an ID, a state, health and events", svc)
			}

			healthy[svc.GetId()] = svc.GetState() == "Running" && svc.GetHealth().GetHealthy() && svc.GetHealth().GetLastChange() != nil
		}

		for _, id := range []string{"apid", "trustd", "etcd"} {
			if !healthy[id] {
				return fmt.Errorf("%s not running healthy (with its last change): %v", id, sl.GetMessages()[0].GetServices())
			}
		}

		return nil
	})

	es, err := c.EtcdStatus(ctx)
	if err != nil || len(es.GetMessages()) != 1 {
		t.Fatalf("etcd status: %v", err)
	}

	named("etcd status", es.GetMessages()[0].GetMetadata())

	if ms := es.GetMessages()[0].GetMemberStatus(); ms.GetMemberId() == 0 || ms.GetLeader() == 0 || ms.GetProtocolVersion() == "" || ms.GetDbSize() == 0 {
		t.Errorf("etcd status %v: want the member ID, the leader, the protocol version and the database size", ms)
	}

	stream, err := c.Logs(ctx, "system", common.ContainerDriver_CONTAINERD, "machined", false, 10)
	if err != nil {
		t.Fatal(err)
	}

	r, err := client.ReadStream(stream)
	if err != nil {
		t.Fatal(err)
	}

	logs, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}

	if lines := strings.Split(strings.TrimSuffix(string(logs), "\n"), "\n"); len(lines) != 10 {
		t.Errorf("logs machined --tail 10: %d lines:\n%s", len(lines), logs)
	}

	nds, err := c.MachineClient.NetworkDeviceStats(ctx, &emptypb.Empty{})
	if err != nil || len(nds.GetMessages()) != 1 {
		t.Fatalf("network device stats: %v", err)
	}

	named("network device stats", nds.GetMessages()[0].GetMetadata())

	if len(nds.GetMessages()[0].GetDevices()) == 0 || nds.GetMessages()[0].GetTotal() == nil {
		t.Errorf("network device stats: no devices or no total: %v", nds.GetMessages()[0])
	}

	ds, err := c.MachineClient.DiskStats(ctx, &emptypb.Empty{})
	if err != nil || len(ds.GetMessages()) != 1 {
		t.Fatalf("disk stats: %v", err)
	}

	named("disk stats", ds.GetMessages()[0].GetMetadata())

	if ds.GetMessages()[0].GetTotal() == nil {
		t.Errorf("disk stats: no total: %v", ds.GetMessages()[0])
	}

	cf, err := c.MachineClient.CPUFreqStats(ctx, &emptypb.Empty{})
	if err != nil || len(cf.GetMessages()) != 1 {
		t.Fatalf("cpu freq stats: %v", err)
	}

	named("cpu freq stats", cf.GetMessages()[0].GetMetadata())
}
