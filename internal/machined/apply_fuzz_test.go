package machined_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	machinetype "github.com/siderolabs/talos/pkg/machinery/config/machine"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/talos-go/talos/internal/configpatch"
	"github.com/talos-go/talos/internal/testenv"
)

// fuzzCoordinator reports whether this process only coordinates `go test -fuzz` workers: it
// never runs the fuzz function, so it needs no node (and a second node would take the
// worker's address).
func fuzzCoordinator() bool {
	fz, worker := flag.Lookup("test.fuzz"), flag.Lookup("test.fuzzworker")

	return fz != nil && fz.Value.String() != "" && (worker == nil || worker.Value.String() != "true")
}

// FuzzApplyConfig sends a running node (a real machined process) any config patch, applied to
// its current config as `talosctl patch` does, or any whole config, with apply-config in
// no-reboot mode. Properties: a patch that does not load or apply is refused with a message;
// a config the node refuses is answered InvalidArgument or FailedPrecondition with a message,
// never a crash, and the node's saved config is byte for byte what it was; the node keeps
// answering either way.
func FuzzApplyConfig(f *testing.F) {
	const addr = "127.5.1.40"

	for _, seed := range []struct {
		data    string
		asPatch bool
	}{
		{"machine:\n  network:\n    hostname: fuzzed\n", true},
		{`[{"op": "replace", "path": "/machine/type", "value": "controlplane"}]`, true},
		{"cluster:\n  controlPlane:\n    endpoint: not-a-url\n", true},
		{"machine:\n  $patch: delete\n", true},
		{"machine:\n  install:\n    disk: 7\n", true},
		{"apiVersion: v1alpha1\nkind: HostnameConfig\nhostname: x\n", true},
		{"version: v1alpha1\nmachine: 7\n", false},
		{"---\n---\nversion: v1alpha1\n", false},
		{string(testenv.Config(f, machinetype.TypeWorker, addr)), false},
	} {
		f.Add([]byte(seed.data), seed.asPatch)
	}

	var (
		n *testenv.Node
		c *client.Client
	)

	if !fuzzCoordinator() {
		n = testenv.StartNode(f, addr, testenv.Config(f, machinetype.TypeWorker, addr))
		c = n.Client(f)
		n.WaitConfigured(f, c)
	}

	saved := func(t *testing.T) []byte {
		data, err := os.ReadFile(filepath.Join(n.State, "STATE", "config.yaml"))
		if err != nil {
			t.Fatal(err)
		}

		return data
	}

	f.Fuzz(func(t *testing.T, data []byte, asPatch bool) {
		ctx := testenv.Context(t, 30*time.Second)
		before := saved(t)
		doc := data

		if asPatch {
			patch, err := configpatcher.LoadPatch(data)
			if err != nil {
				if err.Error() == "" {
					t.Fatal("a patch that does not load is refused without a message")
				}

				return
			}

			out, err := configpatch.Apply(configpatcher.WithBytes(before), []configpatcher.Patch{patch})
			if err != nil {
				return
			}

			if doc, err = out.Bytes(); err != nil {
				return
			}
		}

		_, err := c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: doc, Mode: machine.ApplyConfigurationRequest_NO_REBOOT})
		if err != nil {
			if code := status.Code(err); (code != codes.InvalidArgument && code != codes.FailedPrecondition) || status.Convert(err).Message() == "" {
				t.Fatalf("refused with %v, want InvalidArgument or FailedPrecondition with a message: %v", code, err)
			}

			if after := saved(t); !bytes.Equal(before, after) {
				t.Fatalf("a refused config changed the saved config (%v)", err)
			}
		}

		if _, err = c.Version(ctx); err != nil {
			t.Fatalf("the node stopped answering after apply-config: %v", err)
		}
	})
}
