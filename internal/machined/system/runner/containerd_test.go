package runner_test

import (
	"context"
	"strings"
	"testing"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"

	"github.com/talos-go/talos/internal/machined/system/runner"
	"github.com/talos-go/talos/internal/machined/testutil/ctrdtest"
	"github.com/talos-go/talos/internal/testenv"
)

func TestContainerdRunner(t *testing.T) {
	paths, _ := ctrdtest.StartContainerd(t)
	ref := "registry.local/hello:v1"
	archive := ctrdtest.HelloImage(t, ref)

	// An image neither in containerd nor in an archive: a clear error, nothing pulled.
	missing := &runner.Containerd{Socket: paths.Socket, ID: "missing", Image: "registry.local/none:v1", FIFODir: paths.FIFO}
	if err := missing.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "nothing is pulled") {
		t.Fatalf("an image nowhere: got %v", err)
	}

	out := &testenv.SyncBuffer{}
	r := &runner.Containerd{Socket: paths.Socket, ID: "hello", Image: ref, Archive: archive, HostNetwork: true,
		FIFODir: paths.FIFO, Output: out, GracefulTimeout: 10 * time.Second}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)

	go func() { done <- r.Run(ctx) }()

	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(out.String(), "hello from the container [from-image]") {
		select {
		case err := <-done:
			t.Fatalf("the runner returned before the container ran: %v\n%s", err, out.String())
		default:
		}

		if time.Now().After(deadline) {
			t.Fatalf("no output from the container: %q", out.String())
		}

		time.Sleep(100 * time.Millisecond)
	}

	client, err := containerd.New(paths.Socket, containerd.WithDefaultNamespace(runner.SystemNamespace))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()

	if _, err = client.LoadContainer(context.Background(), "hello"); err != nil {
		t.Fatalf("the container is not in the system namespace: %v", err)
	}

	cancel()

	if err = <-done; err != nil {
		t.Fatalf("stopping: %v", err)
	}

	if !strings.Contains(out.String(), "bye: SIGTERM") {
		t.Errorf("the container did not get SIGTERM: %q", out.String())
	}

	if _, err = client.LoadContainer(context.Background(), "hello"); !errdefs.IsNotFound(err) {
		t.Errorf("the container is left after the runner stopped: %v", err)
	}

	// The image stays imported: a second run needs no archive.
	r2 := &runner.Containerd{Socket: paths.Socket, ID: "hello2", Image: ref, Args: []string{"/hello", "again"}, FIFODir: paths.FIFO, Output: out}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel2()

	go func() {
		for !strings.Contains(out.String(), "[again]") && ctx2.Err() == nil {
			time.Sleep(100 * time.Millisecond)
		}

		cancel2()
	}()

	if err = r2.Run(ctx2); err != nil || !strings.Contains(out.String(), "[again]") {
		t.Fatalf("a second run from the imported image: %v %q", err, out.String())
	}
}
