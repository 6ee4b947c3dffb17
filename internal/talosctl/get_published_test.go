package talosctl

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/resource/meta"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"

	"github.com/talos-go/talos/internal/configsupport"
	"github.com/talos-go/talos/internal/machined/resources"
	"github.com/talos-go/talos/internal/testenv"
	"github.com/talos-go/talos/internal/version"
)

// TestIntegrationPublishedTypes: a process node registers exactly its kind's types
// (resources.For), a type it cannot fill answers NotFound at once, and the types it gained
// (Version, SecurityState, SBOMItem, NetworkStatus, MachineStatus's conditions) hold its state.
func TestIntegrationPublishedTypes(t *testing.T) {
	isolate(t)
	testenv.EtcdNextToMachined(t) // a control plane is ready once etcd runs

	addr := "127.5.23.4"
	n := testenv.StartNode(t, addr, testenv.Config(t, machine.TypeControlPlane, addr))
	c := n.Client(t)
	n.WaitConfigured(t, c)

	ctx := t.Context()
	sock := []string{"--machined-socket", n.Socket()}

	rds, err := c.COSI.List(ctx, resource.NewMetadata(meta.NamespaceName, meta.ResourceDefinitionType, "", resource.VersionUndefined))
	if err != nil {
		t.Fatal(err)
	}

	var got, want []string
	for _, rd := range rds.Items {
		if typ := rd.(*meta.ResourceDefinition).TypedSpec().Type; !strings.HasSuffix(typ, ".cosi.dev") { // cosi's own
			got = append(got, typ)
		}
	}

	for _, d := range resources.For(configsupport.Process) {
		want = append(want, d.ResourceDefinition().Type)
	}

	slices.Sort(got)
	slices.Sort(want)

	if !slices.Equal(got, want) {
		t.Errorf("the node registers %d types, its kind %d:\n got %v\nwant %v", len(got), len(want), got, want)
	}

	// A metal-only type: NotFound at once, not an empty answer.
	start := time.Now()
	code, out, stderr := run(t, append([]string{"get", "kernelcmdline"}, sock...)...)

	if code == 0 || !strings.Contains(stderr, "NotFound") && !strings.Contains(stderr, "not registered") || time.Since(start) > 5*time.Second {
		t.Errorf("get kernelcmdline on a process node: want NotFound within 5s, got code %d after %s\nstdout: %s\nstderr: %s",
			code, time.Since(start), out, stderr)
	}

	out, _ = runUntil(t, func(code int, out, _ string) bool { return code == 0 && strings.Contains(out, version.Tag) },
		append([]string{"get", "version"}, sock...)...)
	mustContain(t, out, "Version", version.Tag)

	// Running and ready: the boot ended, and apid, etcd and trustd run healthy.
	testenv.WaitFor(t, "machine status running and ready", 90*time.Second, func() error {
		ms, err := safe.StateGetByID[*runtimeres.MachineStatus](ctx, c.COSI, runtimeres.MachineStatusID)
		if err != nil {
			return err
		}

		if s := ms.TypedSpec(); s.Stage != runtimeres.MachineStageRunning || !s.Status.Ready || len(s.Status.UnmetConditions) > 0 {
			return fmt.Errorf("stage %s, ready %v, unmet %v", s.Stage, s.Status.Ready, s.Status.UnmetConditions)
		}

		return nil
	})

	ns, err := safe.StateGetByID[*network.Status](ctx, c.COSI, network.StatusID)
	if err != nil {
		t.Fatal(err)
	}

	// The node's loopback address, its hostname and the host's resolvers (the default route is
	// the host's, present or not).
	if s := ns.TypedSpec(); !s.AddressReady || !s.HostnameReady || !s.EtcFilesReady {
		t.Errorf("network status %+v: want address, hostname and etc files ready", *s)
	}

	ss, err := safe.StateGetByID[*runtimeres.SecurityState](ctx, c.COSI, runtimeres.SecurityStateID)
	if err != nil {
		t.Fatal(err)
	}

	// The firmware and the boot are the host's: a process node claims none of them.
	if s := ss.TypedSpec(); s.SecureBoot || s.BootedWithUKI || s.PCRSigningKeyFingerprint != "" {
		t.Errorf("security state %+v: a process node reports the host's firmware", *s)
	}

	items, err := safe.StateListAll[*runtimeres.SBOMItem](ctx, c.COSI)
	if err != nil {
		t.Fatal(err)
	}

	sbom := map[string]string{}
	for item := range items.All() {
		sbom[item.Metadata().ID()] = item.TypedSpec().Version
	}

	if sbom["talos-go"] != version.Tag || !strings.HasPrefix(sbom["etcd"], "v3.") || !strings.HasPrefix(sbom["go"], "go1.") {
		t.Errorf("SBOM %v: want talos-go %s, etcd v3.x and go1.x", sbom, version.Tag)
	}

	if _, ok := sbom["containerd"]; ok {
		t.Errorf("SBOM %v: a process node carries no containerd", sbom)
	}

	// Registered, and empty: the node has no system extensions.
	out, stderr = runUntil(t, ok, append([]string{"get", "extensions"}, sock...)...)
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 1 || !strings.Contains(lines[0], "NAME") || stderr != "" {
		t.Errorf("get extensions: want the header and no rows, got %q (stderr %q)", out, stderr)
	}
}
