package runner_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
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
		FIFODir: paths.FIFO, Output: out, GracefulTimeout: 10 * time.Second, OOMScoreAdj: -998, MemoryReservation: 256 << 20}

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

	ctr, err := client.LoadContainer(context.Background(), "hello")
	if err != nil {
		t.Fatalf("the container is not in the system namespace: %v", err)
	}

	// Lowering the score needs CAP_SYS_RESOURCE (withheld from root in some sandboxes, as on
	// this project's CI host): without it the runner leaves the score out (runc would fail to
	// start the container) and the container runs with its shim's, not a negative one.
	assertTaskResources(t, ctr, -998, runner.MayLowerOOMScoreAdj(), 256<<20)

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

// assertTaskResources checks the running task's oom_score_adj and its memory cgroup's soft
// protection (memory.low on cgroup v2, memory.soft_limit_in_bytes on v1), as runc set them.
func assertTaskResources(t *testing.T, ctr containerd.Container, oomScoreAdj int, lowered bool, reservation int) {
	t.Helper()

	task, err := ctr.Task(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}

	proc := fmt.Sprintf("/proc/%d/", task.Pid())

	data, _ := os.ReadFile(proc + "oom_score_adj")

	switch got, err := strconv.Atoi(strings.TrimSpace(string(data))); {
	case err != nil:
		t.Errorf("the task's oom_score_adj %q: %v", data, err)
	case lowered && got != oomScoreAdj:
		t.Errorf("the task's oom_score_adj is %d, want %d", got, oomScoreAdj)
	case !lowered && got < 0:
		t.Errorf("the task's oom_score_adj is %d without CAP_SYS_RESOURCE", got)
	}

	cgroups, err := os.ReadFile(proc + "cgroup")
	if err != nil {
		t.Fatal(err)
	}

	file := ""

	for line := range strings.Lines(string(cgroups)) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)

		switch {
		case len(parts) != 3:
		case slices.Contains(strings.Split(parts[1], ","), "memory"):
			file = filepath.Join("/sys/fs/cgroup/memory", parts[2], "memory.soft_limit_in_bytes")
		case parts[0] == "0" && file == "":
			file = filepath.Join("/sys/fs/cgroup", parts[2], "memory.low")
		}
	}

	if got, err := os.ReadFile(file); err != nil || strings.TrimSpace(string(got)) != strconv.Itoa(reservation) {
		t.Errorf("%s = %q (%v), want %d", file, got, err, reservation)
	}
}
