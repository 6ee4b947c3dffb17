package metal

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/talos-go/talos/internal/testenv"
)

// wdTimeout is the test's watchdog timeout: twice the document's minimum (10 s), so the node
// outlives several timeouts in a short run.
const wdTimeout = 20 * time.Second

// WatchdogTimerConfig on metal, with the kernel's software watchdog: Debian's cloud kernel has
// no driver for a watchdog QEMU emulates (its i6300esb and iTCO drivers are not built), so the
// config loads softdog (machine.kernel.modules, as an upstream user without a hardware watchdog
// does), whose /dev/watchdog0 has the same interface and resets the guest unless fed. The config
// names it with a 20 s timeout. machined arms it, reports WatchdogTimerStatus with the feed
// interval (a third of the timeout), and the node outlives three timeouts: it is being fed
// (QEMU runs with -no-reboot, so a watchdog reset ends QEMU). Removing the document without a
// reboot disarms the device with the magic close: the status goes, the kernel does not report
// that the watchdog did not stop, sysfs says it is inactive (active, with the timeout, while
// armed), and the node outlives three more timeouts unfed.
func TestWatchdogTimer(t *testing.T) {
	cli := testenv.CLI{Binary: filepath.Join(binDir, "talosctl"), Home: t.TempDir(), Timeout: 30 * time.Second}
	src := serveConfig(t, cli, "machine:\n  kernel:\n    modules:\n      - name: softdog\n",
		fmt.Sprintf("apiVersion: v1alpha1\nkind: WatchdogTimerConfig\ndevice: /dev/watchdog0\ntimeout: %s\n", wdTimeout))

	m := bootWith(t, qemuOptions{open: true}, "ip=10.0.2.15::10.0.2.2:255.255.255.0:metal-1:eth0:off", "talos.config="+src.arg)

	cli.TalosConfig = src.talosconfig
	ep := fmt.Sprintf("127.0.0.1:%d", m.port)
	talosctl := func(args ...string) (string, error) {
		out, errOut, code := cli.Run(t, append([]string{"-e", ep, "-n", "10.0.2.15"}, args...)...)
		if code != 0 {
			return "", fmt.Errorf("talosctl %s: %s", strings.Join(args, " "), errOut)
		}

		return out, nil
	}

	var armed time.Time

	testenv.WaitFor(t, "the watchdog armed", 4*time.Minute, func() error {
		if err := m.running(); err != nil {
			t.Fatal(err)
		}

		out, err := talosctl("get", "watchdogtimerstatus", "-o", "yaml")
		if err != nil {
			return err
		}

		for _, want := range []string{`device: /dev/watchdog0`, `timeout: 20s`, `feedInterval: 6\.666666666s`} {
			if !regexp.MustCompile(want).MatchString(out) {
				return fmt.Errorf("no %s in:\n%s", want, out)
			}
		}

		armed = time.Now()

		return nil
	})

	// The kernel's view of the device (CONFIG_WATCHDOG_SYSFS): running, with the config's timeout.
	sysfs := func(attr string) string {
		out, err := talosctl("read", "/sys/class/watchdog/watchdog0/"+attr)
		if err != nil {
			t.Fatal(err)
		}

		return strings.TrimSpace(out)
	}

	if id, state, timeout := sysfs("identity"), sysfs("state"), sysfs("timeout"); id != "Software Watchdog" || state != "active" || timeout != "20" {
		t.Errorf("watchdog0 armed: identity %q, state %q, timeout %q; want Software Watchdog, active, 20", id, state, timeout)
	}

	// softdog without nowayout: the magic close may stop it.
	if c := m.consoleText(); !strings.Contains(c, "softdog: initialized") || !strings.Contains(c, "(nowayout=0)") {
		t.Errorf("the console does not show softdog loaded without nowayout:\n%s", c)
	}

	// alive fails the test if the machine resets within d of since; it checks every second.
	alive := func(what string, since time.Time, d time.Duration) {
		for end := since.Add(d); time.Now().Before(end); time.Sleep(time.Second) {
			if err := m.running(); err != nil {
				t.Fatalf("the machine was reset %s after it was %s: %v", time.Since(since).Round(time.Second), what, err)
			}
		}
	}

	alive("armed", armed, 3*wdTimeout)

	// Still fed by the same armed device: the status is unchanged and the API answers.
	if out, err := talosctl("get", "watchdogtimerstatus"); err != nil || !strings.Contains(out, "/dev/watchdog0") {
		t.Fatalf("after %s armed: %v\n%s", 3*wdTimeout, err, out)
	}

	t.Logf("armed with a %s timeout, the node ran %s", wdTimeout, time.Since(armed).Round(time.Second))

	// Remove the document, live.
	if _, err := talosctl("patch", "mc", "--mode=no-reboot", "-p", "apiVersion: v1alpha1\nkind: WatchdogTimerConfig\n$patch: delete"); err != nil {
		t.Fatal(err)
	}

	testenv.WaitFor(t, "the watchdog status gone", time.Minute, func() error {
		out, err := talosctl("get", "watchdogtimerstatus")
		if err != nil {
			return err
		}

		if strings.Contains(out, "/dev/watchdog0") {
			return fmt.Errorf("still armed:\n%s", out)
		}

		return nil
	})

	disarmed := time.Now()

	if state := sysfs("state"); state != "inactive" {
		t.Errorf("watchdog0 after the document was removed: state %q, want inactive", state)
	}

	alive("disarmed", disarmed, 3*wdTimeout)

	// The kernel says so when a watchdog is closed without the magic close.
	if c := m.consoleText(); strings.Contains(c, "did not stop") {
		t.Errorf("the kernel reports the watchdog was closed armed:\n%s", c)
	}

	if _, err := talosctl("version"); err != nil {
		t.Fatalf("after %s disarmed: %v", time.Since(disarmed).Round(time.Second), err)
	}

	t.Logf("disarmed, the node ran %s more", time.Since(disarmed).Round(time.Second))
}
