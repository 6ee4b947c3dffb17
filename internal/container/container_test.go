package container

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/talos-go/talos/internal/container/netnstest"
)

// The tests make links: they run in a network namespace of their own.
func TestMain(m *testing.M) {
	if code, done := netnstest.Isolate(); done {
		os.Exit(code)
	}

	os.Exit(m.Run())
}

func needRootInPrivateNetns(t *testing.T) {
	t.Helper()

	if os.Geteuid() != 0 {
		t.Skip("needs root: makes links and cgroups")
	}

	if !netnstest.Own() {
		t.Skip("not in a network namespace of its own")
	}
}

// A process in its own network namespace gets eth0 on the bridge with its address and a
// default route; the bridge's gateway reaches it, and the veth goes with the namespace.
func TestAttachNetwork(t *testing.T) {
	needRootInPrivateNetns(t)

	const bridge, hostEnd = "br-test", "veth-test"

	if err := CreateBridge(bridge, netip.MustParsePrefix("10.77.0.1/24"), 1400); err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { DeleteLink(bridge) })

	if err := CreateBridge(bridge, netip.MustParsePrefix("10.77.0.1/24"), 1400); err == nil || !strings.Contains(err.Error(), "exists already") {
		t.Fatalf("a second bridge of the same name: %v", err)
	}

	node := exec.Command("sleep", "60")
	node.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}

	if err := node.Start(); err != nil {
		t.Fatal(err)
	}

	nn := NodeNetwork{Bridge: bridge, HostEnd: hostEnd, Address: netip.MustParsePrefix("10.77.0.2/24"), Gateway: netip.MustParseAddr("10.77.0.1"), MTU: 1400}
	if err := nn.Attach(node.Process.Pid); err != nil {
		t.Fatal(err)
	}

	// Nothing listens in the node: a refused connection proves the path, a timeout would not.
	_, err := net.DialTimeout("tcp", "10.77.0.2:9", 5*time.Second)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dialing the node through the bridge: %v", err)
	}

	out, err := exec.Command("nsenter", "-t", strconv.Itoa(node.Process.Pid), "-n", "ip", "-o", "route").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "default via 10.77.0.1 dev eth0") {
		t.Fatalf("routes in the node: %v\n%s", err, out)
	}

	node.Process.Kill()
	node.Wait()

	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := net.InterfaceByName(hostEnd); err != nil {
			break
		}

		if time.Now().After(deadline) {
			t.Fatalf("%s outlived the node's namespace", hostEnd)
		}
	}
}

func TestCgroupLimitsAndRemoval(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: makes cgroups")
	}

	name := "test-" + strconv.Itoa(os.Getpid()) + "/node"

	cg, err := NewCgroup(name, Limits{MemoryBytes: 256 << 20, CPUs: 0.5})
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { RemoveCgroup(name) })

	want := map[string]string{"memory.limit_in_bytes": "268435456", "memory.max": "268435456", "cpu.cfs_quota_us": "50000", "cpu.max": "50000 100000"}
	checked := 0

	for _, d := range cg.Dirs {
		for f, v := range want {
			b, err := os.ReadFile(filepath.Join(d, f))
			if err != nil {
				continue
			}

			checked++

			if got := strings.TrimSpace(string(b)); got != v {
				t.Errorf("%s/%s = %q, want %q", d, f, got, v)
			}
		}
	}

	if checked < 2 {
		t.Fatalf("found %d limit files in %v", checked, cg.Dirs)
	}

	// Removal ends what is left inside.
	p := exec.Command("sleep", "60")
	if err = p.Start(); err != nil {
		t.Fatal(err)
	}

	if err = cg.Add(p.Process.Pid); err != nil {
		t.Fatal(err)
	}

	exited := make(chan struct{})
	go func() { p.Wait(); close(exited) }()

	if err = RemoveCgroup(name); err != nil {
		t.Fatal(err)
	}

	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		t.Fatal("the process in the removed cgroup still runs")
	}

	for _, d := range CgroupDirs(strings.Split(name, "/")[0]) {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("%s is left", d)
		}
	}
}
