package server

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"google.golang.org/grpc/codes"

	"github.com/talos-go/talos/internal/machined/resources"
	"github.com/talos-go/talos/internal/machined/runtime"
	"github.com/talos-go/talos/internal/machined/system/logging"
)

// serveLogs serves a Machine whose services log into a real log folder.
func serveLogs(t *testing.T) (*client.Client, *logging.Manager) {
	t.Helper()

	st, err := resources.NewState(t.Context())
	if err != nil {
		t.Fatal(err)
	}

	logs, err := logging.NewManager(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { logs.Close() })

	return serveMachine(t, &Machine{R: &runtime.Runtime{Mode: runtime.Mode{Kind: runtime.Container}, Paths: runtime.Paths{Root: "/"}, State: st, Logs: logs}}), logs
}

// Logs: --tail 10 is exactly the last 10 lines of a longer log, -f then streams what is written
// next, and an unknown service is refused as upstream refuses it (Unknown, "log … was not
// registered"), following or not.
func TestLogsTailFollowUnknown(t *testing.T) {
	c, logs := serveLogs(t)

	w, err := logs.Writer("svc")
	if err != nil {
		t.Fatal(err)
	}

	for i := range 25 {
		fmt.Fprintf(w, "line %d\n", i)
	}

	stream, err := c.Logs(t.Context(), "system", common.ContainerDriver_CONTAINERD, "svc", false, 10)
	if err != nil {
		t.Fatal(err)
	}

	var got strings.Builder

	for {
		d, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}

		if err != nil {
			t.Fatal(err)
		}

		got.Write(d.Bytes)
	}

	var want strings.Builder
	for i := 15; i < 25; i++ {
		fmt.Fprintf(&want, "line %d\n", i)
	}

	if got.String() != want.String() {
		t.Fatalf("--tail 10:\n%s\nwant:\n%s", got.String(), want.String())
	}

	// -f --tail 1: the last line, then each new one as it is written.
	stream, err = c.Logs(t.Context(), "system", common.ContainerDriver_CONTAINERD, "svc", true, 1)
	if err != nil {
		t.Fatal(err)
	}

	recv := func() string {
		d, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}

		return string(d.Bytes)
	}

	if s := recv(); s != "line 24\n" {
		t.Fatalf("-f --tail 1 began with %q", s)
	}

	for _, line := range []string{"new 1\n", "new 2\n"} {
		fmt.Fprint(w, line)

		if s := recv(); s != line {
			t.Fatalf("followed %q, want %q", s, line)
		}
	}

	for _, follow := range []bool{false, true} {
		stream, err = c.Logs(t.Context(), "system", common.ContainerDriver_CONTAINERD, "nosuch", follow, 10)
		if err == nil {
			done := make(chan error, 1)
			go func() { _, err := stream.Recv(); done <- err }()

			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatalf("follow %v: an unknown service's log is waited for, not refused", follow)
			}
		}

		if client.StatusCode(err) != codes.Unknown || !strings.Contains(err.Error(), `log "nosuch" was not registered`) {
			t.Fatalf("follow %v: unknown service: %v", follow, err)
		}
	}
}
