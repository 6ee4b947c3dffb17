package machined_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	machinetype "github.com/siderolabs/talos/pkg/machinery/config/machine"

	"github.com/talos-go/talos/internal/testenv"
)

// TestPatchEveryDocumentKind: `talosctl patch mc` on a running node adds a document beside
// v1alpha1 with a strategic merge patch, changes it with another, and removes it with
// `$patch: delete`; `get machineconfig` shows every document each time. A JSON 6902 patch
// changes a single-document config, and on a multi-document one is refused as upstream
// refuses it, with the way out (a strategic merge patch).
func TestPatchEveryDocumentKind(t *testing.T) {
	testenv.MachinedBinary(t)

	const addr = "127.5.1.15"

	n := testenv.StartNode(t, addr, testenv.Config(t, machinetype.TypeWorker, addr))
	n.WaitConfigured(t, n.Client(t))
	isolateTalosctl(t)

	talosctl := func(args ...string) string {
		t.Helper()

		code, out := runTalosctl(append([]string{"--machined-socket", n.Socket()}, args...)...)
		if code != 0 {
			t.Fatalf("talosctl %v: exit %d:\n%s", args, code, out)
		}

		return out
	}

	// shows waits until `get machineconfig -o yaml` holds (or lacks) each text.
	shows := func(what string, want, not []string) {
		t.Helper()

		testenv.WaitFor(t, what, 30*time.Second, func() error {
			out := talosctl("get", "machineconfig", "-o", "yaml")
			for _, w := range want {
				if !strings.Contains(out, w) {
					return fmt.Errorf("get machineconfig lacks %q", w)
				}
			}

			for _, w := range not {
				if strings.Contains(out, w) {
					return fmt.Errorf("get machineconfig still holds %q", w)
				}
			}

			return nil
		})
	}

	// JSON 6902 on the single v1alpha1 document.
	talosctl("patch", "mc", "--mode", "no-reboot", "--patch", `[{"op": "add", "path": "/debug", "value": true}]`)
	shows("the JSON patch in the config", []string{"debug: true"}, nil)

	// Strategic merge: a new document, then a change to it, then its removal.
	talosctl("patch", "mc", "--mode", "no-reboot", "--patch", "apiVersion: v1alpha1\nkind: KmsgLogConfig\nname: remote\nurl: udp://127.0.0.1:9\n")
	shows("the added document", []string{"kind: KmsgLogConfig", "udp://127.0.0.1:9", "debug: true", "version: v1alpha1"}, nil)

	talosctl("patch", "mc", "--mode", "no-reboot", "--patch", "apiVersion: v1alpha1\nkind: KmsgLogConfig\nname: remote\nurl: udp://127.0.0.1:10\n")
	shows("the changed document", []string{"udp://127.0.0.1:10"}, nil)

	// JSON 6902 on a multi-document config: refused, with the way out.
	code, out := runTalosctl("--machined-socket", n.Socket(), "patch", "mc", "--patch", `[{"op": "add", "path": "/persist", "value": true}]`)
	if code == 0 || !strings.Contains(out, "JSON6902 patches are not supported for multi-document machine configuration") {
		t.Errorf("a JSON patch on a multi-document config: want refused, got exit %d:\n%s", code, out)
	}

	talosctl("patch", "mc", "--mode", "no-reboot", "--patch", "apiVersion: v1alpha1\nkind: KmsgLogConfig\nname: remote\n$patch: delete\n")
	shows("the document removed", []string{"debug: true", "version: v1alpha1"}, []string{"KmsgLogConfig"})
}
