package metal

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"

	"github.com/talos-go/talos/internal/configpatch"
	"github.com/talos-go/talos/internal/provision"
	"github.com/talos-go/talos/internal/testenv"
)

const (
	// powerLossRuns is how many times TestPowerLossDuringApply cuts the power. Each run is a
	// boot of the installed node from its disk, the bulk of the test's time.
	powerLossRuns = 20
	// powerLossWindow is the longest wait between starting an apply and cutting the power, and
	// powerLossDuring the longest for every other run: the apply (talosctl's start, TLS,
	// validation, the write, the new config taking effect) took 120-760 ms under TCG here, so
	// half the cuts fall mostly before and during it, the others mostly after it.
	powerLossWindow = 3 * time.Second
	powerLossDuring = 600 * time.Millisecond
	// powerLossSysctl tells the configs apart, and shows which one the node runs: each config the
	// test applies sets it to a value of its own (the original config leaves it at the kernel's
	// default, 9).
	powerLossSysctl = "net.ipv4.tcp_keepalive_probes"
)

// A power loss during or just after `apply-config` leaves the node bootable, with the old
// config or the new one, never an empty or partial one, and with META and its boot slot intact.
//
// The node is installed to its disk (STATE holds the config). The power loss is QEMU killed
// (SIGKILL) at a random moment up to powerLossDuring (odd runs) or powerLossWindow (even runs)
// after the apply starts: the guest's page cache and every write it had not handed to its disk
// are lost. The disk is a raw file with
// QEMU's default cache mode, writeback: the guest sees a volatile write cache and its flushes
// reach the host's disk (cache=unsafe would drop them). What this does not reproduce is a disk
// losing writes the guest handed to it without a flush: those are in the host's page cache,
// which QEMU's death leaves alone. Then the node's launcher is started again on the same disk.
// A config the node acknowledged before the cut must be the one it boots with.
func TestPowerLossDuringApply(t *testing.T) {
	_, cli, dir := qemuCluster(t, "qemu-power")

	const cidr, gateway, node, name = "10.5.19.0/24", "10.5.19.1", "10.5.19.2", "qemu-power-controlplane-1"

	start := time.Now()
	cli.Must(t, oneNodeCluster("qemu-power", cidr, gateway, "--with-uefi=false")...)
	t.Logf("installed and running from its disk in %s", time.Since(start).Round(100*time.Millisecond))

	waitBootedSlot(t, cli, node, "A", "vmlinuz")
	cli.Must(t, "-n", node, "meta", "write", "0x0a", "kept-over-power-loss")

	nodeID := identity(t, cli, node)

	original := []byte(cli.Must(t, "-n", node, "read", "/system/state/config.yaml"))
	if _, err := configloader.NewFromBytes(original); err != nil {
		t.Fatalf("the node's config does not load: %v", err)
	}

	// The sysctl's value in each config the test has seen, by digest.
	sysctlOf := map[string]string{digest(original): "9"}
	current := original

	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, seed>>1))
	t.Logf("seed %d", seed)

	var outcomes struct{ old, new, acked int }

	// A node on its way up must not hold a poll for the suite's long command timeout.
	pollCLI := cli
	pollCLI.Timeout = 20 * time.Second

	total := time.Now()

	for i := 1; i <= powerLossRuns; i++ {
		next := withSysctl(t, original, strconv.Itoa(20+i))
		sysctlOf[digest(next)] = strconv.Itoa(20 + i)

		file := filepath.Join(t.TempDir(), "config.yaml")
		if err := os.WriteFile(file, next, 0o600); err != nil {
			t.Fatal(err)
		}

		window := powerLossWindow
		if i%2 == 1 {
			window = powerLossDuring
		}

		delay := time.Duration(rng.Int64N(int64(window)))
		iter := time.Now()

		// talosctl runs beside the timer: Run with a nil t reports a talosctl that cannot start
		// instead of failing t off the test's goroutine; its timeout ends it once the node is
		// gone.
		type result struct {
			out  string
			code int
			at   time.Duration
		}

		applied := make(chan result, 1)
		applyCLI := cli
		applyCLI.Timeout = 30 * time.Second

		go func() {
			out, errOut, code := applyCLI.Run(nil, "-n", node, "apply-config", "-f", file, "--mode", "no-reboot")
			applied <- result{out + errOut, code, time.Since(iter)}
		}()

		time.Sleep(delay)

		var acked *result

		select {
		case r := <-applied:
			acked = &r
		default:
		}

		cutPower(t, cli, dir, name)

		boot := time.Now()

		testenv.WaitFor(t, fmt.Sprintf("run %d: the node back after the power cut", i), 5*time.Minute, func() error {
			out, errOut, code := pollCLI.Run(t, "-n", node, "version")
			if code != 0 {
				return fmt.Errorf("exit %d: %s%s", code, out, errOut)
			}

			return nil
		})

		booted := time.Since(boot)

		if acked == nil {
			<-applied // it ended with the node, or timed out: its answer came too late to count
		}

		onDisk := []byte(cli.Must(t, "-n", node, "read", "/system/state/config.yaml"))

		outcome := "partial"

		switch digest(onDisk) {
		case digest(current):
			outcome = "old"
			outcomes.old++
		case digest(next):
			outcome = "new"
			outcomes.new++
		}

		ackText := "talosctl still waiting at the cut"
		if acked != nil {
			ackText = fmt.Sprintf("talosctl ended %s after the start, exit %d", acked.at.Round(time.Millisecond), acked.code)
		}

		t.Logf("run %2d: cut %s after the apply started (%s); boots with the %s config (%d bytes); back in %s, run took %s",
			i, delay.Round(time.Millisecond), ackText, outcome, len(onDisk), booted.Round(100*time.Millisecond), time.Since(iter).Round(100*time.Millisecond))

		if _, err := configloader.NewFromBytes(onDisk); err != nil {
			t.Errorf("run %d: the config on STATE does not load: %v", i, err)
		}

		if outcome == "partial" {
			t.Fatalf("run %d: the config on STATE (%d bytes, %.60q) is neither the old one (%d bytes) nor the new one (%d bytes)",
				i, len(onDisk), onDisk, len(current), len(next))
		}

		switch {
		case acked == nil:
		case acked.code == 0:
			outcomes.acked++

			if outcome != "new" {
				t.Errorf("run %d: the apply was acknowledged (%s) before the cut, yet the node boots with the old config", i, strings.TrimSpace(acked.out))
			}
		default:
			t.Errorf("run %d: the apply failed before the cut: exit %d: %s", i, acked.code, acked.out)
		}

		// The node runs the config it booted with.
		want := sysctlOf[digest(onDisk)]
		testenv.WaitFor(t, fmt.Sprintf("run %d: %s = %s", i, powerLossSysctl, want), 2*time.Minute, func() error {
			out, errOut, code := cli.Run(t, "-n", node, "read", "/proc/sys/"+strings.ReplaceAll(powerLossSysctl, ".", "/"))
			if code != 0 || strings.TrimSpace(out) != want {
				return fmt.Errorf("exit %d: %q%s", code, out, errOut)
			}

			return nil
		})

		checkIntact(t, cli, node, nodeID, i)

		current = onDisk
	}

	t.Logf("%d power cuts: %d booted with the old config, %d with the new (%d applies acknowledged before the cut); %s in all, %s a run",
		powerLossRuns, outcomes.old, outcomes.new, outcomes.acked, time.Since(total).Round(time.Second), (time.Since(total) / powerLossRuns).Round(100*time.Millisecond))
}

// checkIntact checks what a power cut must not touch: META, the boot slot, the node's id, and
// no leftovers of the interrupted write.
func checkIntact(t *testing.T, cli testenv.CLI, node, nodeID string, run int) {
	t.Helper()

	if out := cli.Must(t, "-n", node, "get", "metakeys", "0x0a"); !strings.Contains(out, "kept-over-power-loss") {
		t.Errorf("run %d: META lost its key:\n%s", run, out)
	}

	if out := cli.Must(t, "-n", node, "read", "/proc/cmdline"); !strings.Contains(out, "BOOT_IMAGE=/A/vmlinuz") {
		t.Errorf("run %d: the node did not boot slot A from its disk: /proc/cmdline %s", run, out)
	}

	if id := identity(t, cli, node); id != nodeID {
		t.Errorf("run %d: the node id changed from %s to %s", run, nodeID, id)
	}

	// Temporary files of the interrupted write are cleared at boot; no staged config appeared.
	if out := cli.Must(t, "-n", node, "ls", "/system/state"); strings.Contains(out, ".tmp-") || strings.Contains(out, "config.staged.yaml") {
		t.Errorf("run %d: STATE holds leftovers:\n%s", run, out)
	}
}

// cutPower kills the node's QEMU (its launcher ends with it) and starts its launcher again on
// the same disk, recording it in the cluster's state so that destroy stops it.
func cutPower(t *testing.T, cli testenv.CLI, dir, name string) {
	t.Helper()

	cutPowerAnd(t, cli, dir, name, nil)
}

// cutPowerAnd is cutPower running meanwhile, with the machine off, what the test does to it
// (e.g. a bigger disk), given the node's state folder.
func cutPowerAnd(t *testing.T, cli testenv.CLI, dir, name string, meanwhile func(state string)) {
	t.Helper()

	c, err := provision.Load(cli.ClusterRoot, filepath.Base(dir))
	if err != nil {
		t.Fatal(err)
	}

	n := &c.Nodes[0]
	if n.Name != name {
		t.Fatalf("the cluster's node is %s, want %s", n.Name, name)
	}

	launcher := n.PID

	argv, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", launcher))
	if err != nil || !strings.Contains(string(argv), n.State) {
		t.Fatalf("the node's launcher (pid %d) is not running: %v %q", launcher, err, argv)
	}

	qemuPID := childNamed(t, launcher, "qemu-system-x86")
	if err = syscall.Kill(qemuPID, syscall.SIGKILL); err != nil {
		t.Fatalf("killing QEMU (pid %d): %v", qemuPID, err)
	}

	testenv.WaitFor(t, "the launcher ended with its QEMU", 30*time.Second, func() bool {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", launcher))

		return !strings.Contains(string(b), n.State) // gone, or a zombie
	})

	log, err := os.OpenFile(filepath.Join(dir, name+".log"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()

	if meanwhile != nil {
		meanwhile(n.State)
	}

	fmt.Fprintf(log, "[power-loss test] QEMU (pid %d) killed: starting the launcher again\n", qemuPID)

	args := strings.Split(strings.TrimSuffix(string(argv), "\x00"), "\x00")
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}

	if err = cmd.Start(); err != nil {
		t.Fatal(err)
	}

	go cmd.Wait() // only reaps; the node's log says how it ended

	n.PID = cmd.Process.Pid
	if err = c.Save(); err != nil {
		t.Fatal(err)
	}
}

// childNamed is the pid of parent's child whose command is comm.
func childNamed(t *testing.T, parent int, comm string) int {
	t.Helper()

	procs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}

		// pid (comm) state ppid ...: comm may hold spaces, so split after its last ')'.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		j := strings.IndexByte(s, '(')

		if i < 0 || j < 0 {
			continue
		}

		fields := strings.Fields(s[i+1:])
		if len(fields) < 2 || fields[1] != strconv.Itoa(parent) || !strings.HasPrefix(s[j+1:i], comm) {
			continue
		}

		pid, _ := strconv.Atoi(strings.TrimSpace(s[:j]))

		return pid
	}

	t.Fatalf("no %s child of pid %d", comm, parent)

	return 0
}

// identity is the node's id (cluster Identity), kept on STATE.
func identity(t *testing.T, cli testenv.CLI, node string) string {
	t.Helper()

	out := cli.Must(t, "-n", node, "get", "identities", "-o", "yaml")

	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "nodeId:"); ok && strings.TrimSpace(v) != "" {
			return strings.TrimSpace(v)
		}
	}

	t.Fatalf("get identities: no nodeId:\n%s", out)

	return ""
}

// withSysctl is cfg with powerLossSysctl set to value.
func withSysctl(t *testing.T, cfg []byte, value string) []byte {
	t.Helper()

	patch, err := configpatcher.LoadPatch(fmt.Appendf(nil, `{"machine": {"sysctls": {%q: %q}}}`, powerLossSysctl, value))
	if err != nil {
		t.Fatal(err)
	}

	out, err := configpatch.Apply(configpatcher.WithBytes(cfg), []configpatcher.Patch{patch})
	if err != nil {
		t.Fatal(err)
	}

	b, err := out.Bytes()
	if err != nil {
		t.Fatal(err)
	}

	return b
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)

	return hex.EncodeToString(sum[:])
}
