package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/state"
	"github.com/cosi-project/runtime/pkg/state/impl/inmem"
	"github.com/cosi-project/runtime/pkg/state/impl/namespaced"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/talos-go/talos/internal/machined/runtime"
	"github.com/talos-go/talos/internal/machined/server"
	"github.com/talos-go/talos/internal/machined/system/runner"
	"github.com/talos-go/talos/internal/machined/testutil/ctrdtest"
	"github.com/talos-go/talos/internal/testenv"
)

// Stats measures a running container's cgroup; Restart of a container that is no service stops
// its task (its owner starts it again).
func TestStatsAndRestart(t *testing.T) {
	paths, root := ctrdtest.StartContainerd(t)
	ref := "registry.local/hello:v1"
	archive := ctrdtest.HelloImage(t, ref)

	s := &server.Machine{R: &runtime.Runtime{Paths: runtime.Paths{Root: root}, State: state.WrapCore(namespaced.NewState(inmem.Build))}}
	ctx := context.Background()

	out := &testenv.SyncBuffer{}
	r := &runner.Containerd{Socket: paths.Socket, ID: "hello", Image: ref, Archive: archive, HostNetwork: true, FIFODir: paths.FIFO, Output: out}

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()

	done := make(chan error, 1)

	go func() { done <- r.Run(runCtx) }()

	testenv.WaitFor(t, "the container", time.Minute, func() error {
		if !strings.Contains(out.String(), "hello from the container") {
			return status.Error(codes.Unavailable, out.String())
		}

		return nil
	})

	resp, err := s.Stats(ctx, &machine.StatsRequest{Namespace: "system"})
	if err != nil {
		t.Fatal(err)
	}

	stats := resp.Messages[0].Stats
	if len(stats) != 1 || stats[0].Id != "hello" || stats[0].Namespace != "system" || stats[0].MemoryUsage == 0 || stats[0].CpuUsage == 0 {
		t.Fatalf("stats in system: %v", stats)
	}

	if resp, err = s.Stats(ctx, &machine.StatsRequest{Driver: common.ContainerDriver_CRI}); err != nil || len(resp.Messages[0].Stats) != 0 {
		t.Fatalf("stats in k8s.io: %v %v", resp, err)
	}

	if _, err = s.Restart(ctx, &machine.RestartRequest{Namespace: "system", Id: "nothing"}); status.Code(err) != codes.NotFound {
		t.Fatalf("restart of an unknown container: %v", err)
	}

	if _, err = s.Restart(ctx, &machine.RestartRequest{Namespace: "system", Id: "hello"}); err != nil {
		t.Fatal(err)
	}

	select {
	case err = <-done:
		if err != nil || !strings.Contains(out.String(), "bye: SIGTERM") {
			t.Fatalf("after restart: %v, output %q", err, out.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the container did not stop on restart: %q", out.String())
	}
}
