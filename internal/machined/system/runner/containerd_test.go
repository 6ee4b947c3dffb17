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

// With a Cgroup the container runs in it (the OCI spec's cgroupsPath), made with its figures
// before runc starts it, and its CPU shares reach the cpu controller (cpu.shares on cgroup v1,
// the cpu.weight runc maps them to on v2). The cgroup is made under the test's own.
func TestContainerdRunnerCgroup(t *testing.T) {
	paths, _ := ctrdtest.StartContainerd(t)
	ref := "registry.local/hello:v1"
	archive := ctrdtest.HelloImage(t, ref)

	v2 := false
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		v2 = true
	}

	own := ""

	for line := range strings.Lines(readFile(t, "/proc/self/cgroup")) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) == 3 && ((v2 && parts[0] == "0") || (!v2 && slices.Contains(strings.Split(parts[1], ","), "memory"))) {
			own = parts[2]
		}
	}

	parent := &runner.Cgroup{Path: filepath.Join(own, fmt.Sprintf("ctrd-runner-test-%d", os.Getpid()))}
	cg := &runner.Cgroup{Path: filepath.Join(parent.Path, "svc"), Parent: parent, MemoryMax: 64 << 20, CPUWeight: 79}

	t.Cleanup(func() {
		// runc makes the path in every v1 hierarchy and removes only the leaf.
		dirs, _ := filepath.Glob("/sys/fs/cgroup/*" + cg.Path)
		if v2 {
			dirs = []string{"/sys/fs/cgroup" + cg.Path}
		}

		// runc may have removed the leaf, and the parent is not made in every hierarchy.
		for _, d := range dirs {
			os.Remove(d)
			os.Remove(filepath.Dir(d))
		}
	})

	out := &testenv.SyncBuffer{}
	r := &runner.Containerd{Socket: paths.Socket, ID: "hello-cgroup", Image: ref, Archive: archive, FIFODir: paths.FIFO, Output: out,
		GracefulTimeout: 10 * time.Second, Cgroup: cg, CPUShares: 2048}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)

	go func() { done <- r.Run(ctx) }()

	testenv.WaitFor(t, "the container's output", time.Minute, func() error {
		if !strings.Contains(out.String(), "hello from the container") {
			return fmt.Errorf("output so far: %q", out.String())
		}

		return nil
	})

	client, err := containerd.New(paths.Socket, containerd.WithDefaultNamespace(runner.SystemNamespace))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()

	ctr, err := client.LoadContainer(context.Background(), "hello-cgroup")
	if err != nil {
		t.Fatal(err)
	}

	task, err := ctr.Task(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}

	want := map[string]string{}
	if v2 {
		want["memory.max"] = strconv.Itoa(64 << 20)
		// runc writes the weight its shares map to, the cgroup's own figure too.
		if strings.Contains(readFile(t, filepath.Join("/sys/fs/cgroup", filepath.Dir(own), "cgroup.controllers")), "cpu") {
			want["cpu.weight"] = "79"
		}
	}

	for line := range strings.Lines(readFile(t, fmt.Sprintf("/proc/%d/cgroup", task.Pid()))) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}

		controllers := strings.Split(parts[1], ",")

		switch {
		case v2 && parts[0] == "0", !v2 && slices.Contains(controllers, "memory"), !v2 && slices.Contains(controllers, "cpu"):
			if parts[2] != cg.Path {
				t.Errorf("the task is in %s (%s), want %s", parts[2], line, cg.Path)
			}
		}

		switch {
		case !v2 && slices.Contains(controllers, "memory"):
			want[filepath.Join("/sys/fs/cgroup/memory", cg.Path, "memory.limit_in_bytes")] = strconv.Itoa(64 << 20)
		case !v2 && slices.Contains(controllers, "cpu"):
			want[filepath.Join("/sys/fs/cgroup", parts[1], cg.Path, "cpu.shares")] = "2048"
		}
	}

	for file, value := range want {
		if !filepath.IsAbs(file) {
			file = filepath.Join("/sys/fs/cgroup", cg.Path, file)
		}

		if got := strings.TrimSpace(readFile(t, file)); got != value {
			t.Errorf("%s = %s, want %s", file, got, value)
		}
	}

	if len(want) < 2 && !v2 {
		t.Errorf("no memory and cpu hierarchies checked: %v", want)
	}

	cancel()

	if err = <-done; err != nil {
		t.Fatalf("stopping: %v", err)
	}
}

func readFile(t *testing.T, name string) string {
	t.Helper()

	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}

	return string(data)
}
