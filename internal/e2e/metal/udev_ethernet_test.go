package metal

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/talos-go/talos/internal/container/netnstest"
	"github.com/talos-go/talos/internal/testenv"
)

// machine.udev.rules and EthernetConfig on the node's own kernel, in one boot; and zswap's
// absence, the reason ZswapConfig stays refused.
//
// The guest has a blank virtio disk with the serial "udevdata" and a second virtio-net card on
// a four-queue tap (multiqueue: QEMU's user network has one queue). The config's udev rule
// matches the disk by its serial, links /dev/talos-test/data-vda to it and writes its
// read_ahead_kb (the kernel's default is 128); a rule added without a reboot makes its link, one
// with a key this udevd does not run is refused by name, and removing the rules removes the links. The EthernetConfig of eth1 asks one combined channel (virtio-net starts with
// one per CPU, two here) and GRO off: EthernetStatus says so and the kernel's own view agrees
// (eth1's queues in sysfs).
func TestUdevRulesAndEthernetConfig(t *testing.T) {
	if !netnstest.Own() {
		t.Skip("the multiqueue NIC's tap needs a network namespace of its own (run as root)")
	}

	disk := filepath.Join(t.TempDir(), "data.raw")
	if err := os.WriteFile(disk, nil, 0o600); err != nil {
		t.Fatal(err)
	}

	if err := os.Truncate(disk, 16<<20); err != nil {
		t.Fatal(err)
	}

	cli := testenv.CLI{Binary: filepath.Join(binDir, "talosctl"), Home: t.TempDir(), Timeout: 30 * time.Second}
	src := serveConfig(t, cli, `machine:
  udev:
    rules:
      - SUBSYSTEM=="block", KERNEL=="vd*", ATTR{serial}=="udevdata", ENV{TEST_ROLE}="data"
      - ENV{TEST_ROLE}=="data", SYMLINK+="talos-test/data-%k", ATTR{queue/read_ahead_kb}="1024"
`, `apiVersion: v1alpha1
kind: EthernetConfig
name: eth1
channels:
  combined: 1
features:
  rx-gro: false
`)

	m := bootWith(t, qemuOptions{open: true, args: []string{
		"-drive", "file=" + disk + ",format=raw,if=none,id=data", "-device", "virtio-blk-pci,drive=data,serial=udevdata",
		"-netdev", "tap,id=mq,ifname=mq0,script=no,downscript=no,queues=4",
		"-device", "virtio-net-pci,netdev=mq,mq=on,vectors=10",
	}}, "ip=10.0.2.15::10.0.2.2:255.255.255.0:metal-1:eth0:off", "talos.config="+src.arg)

	cli.TalosConfig = src.talosconfig
	node := []string{"-e", fmt.Sprintf("127.0.0.1:%d", m.port), "-n", "10.0.2.15"}

	// waitFor waits until `talosctl args` prints something matching want (or, with want "",
	// fails).
	waitFor := func(what string, timeout time.Duration, want string, args ...string) string {
		t.Helper()

		var out string

		testenv.WaitFor(t, what, timeout, func() error {
			if err := m.running(); err != nil {
				t.Fatal(err)
			}

			var (
				errOut string
				code   int
			)

			out, errOut, code = cli.Run(t, append(node, args...)...)

			switch {
			case want == "" && code == 0:
				return fmt.Errorf("talosctl %s succeeded:\n%s", strings.Join(args, " "), out)
			case want == "":
				out = errOut

				return nil
			case code != 0:
				return fmt.Errorf("%s", errOut)
			case !regexp.MustCompile(want).MatchString(out):
				return fmt.Errorf("no %s in:\n%s", want, out)
			}

			return nil
		})

		return out
	}

	// The rule's link, to the disk the rule matched by its serial.
	waitFor("the udev rule's link", 4*time.Minute, `data-vda\s.*-> \.\./vda`, "ls", "-l", "/dev/talos-test")
	waitFor("the udev rule's sysfs write", 30*time.Second, `^1024\n?$`, "read", "/sys/class/block/vda/queue/read_ahead_kb")

	// EthernetConfig: one combined channel of four, GRO off.
	status := waitFor("eth1's EthernetStatus", time.Minute, `(?s)channels:.*combined: 1\n`, "get", "ethernetstatus", "eth1", "-o", "yaml")
	for _, want := range []string{`combined-max: 4\n`, `rx-gro: off\n`} {
		if !regexp.MustCompile(want).MatchString(status) {
			t.Errorf("eth1's EthernetStatus has no %s:\n%s", want, status)
		}
	}

	// The kernel's view: eth1 has one rx and one tx queue in use.
	queues := cli.Must(t, append(node, "ls", "/sys/class/net/eth1/queues")...)
	if got := regexp.MustCompile(`\b[rt]x-\d+\b`).FindAllString(queues, -1); strings.Join(got, " ") != "rx-0 tx-0" {
		t.Errorf("eth1's queues in sysfs: %v, want rx-0 tx-0:\n%s", got, queues)
	}

	// eth0, not named by the document, keeps its driver's defaults.
	if eth0 := cli.Must(t, append(node, "get", "ethernetstatus", "eth0", "-o", "yaml")...); !strings.Contains(eth0, "rx-gro: on\n") {
		t.Errorf("eth0's GRO changed, or is not reported:\n%s", eth0)
	}

	t.Logf("eth1: %s", regexp.MustCompile(`(?s)channels:.*?combined: \d+\n`).FindString(status))

	// A new rule, live: the reloaded rules are replayed on the disk (a machine config patch
	// appends to the list).
	cli.Must(t, append(node, "patch", "mc", "--mode=no-reboot", "-p",
		"machine:\n  udev:\n    rules:\n      - SUBSYSTEM==\"block\", ATTR{serial}==\"udevdata\", SYMLINK+=\"talos-test/renamed\"\n")...)

	waitFor("the new rule's link", time.Minute, `renamed\s.*-> \.\./vda`, "ls", "-l", "/dev/talos-test")

	if out := cli.Must(t, append(node, "ls", "/dev/talos-test")...); !strings.Contains(out, "data-vda") {
		t.Errorf("the first rule's link went:\n%s", out)
	}

	// A rule this udevd cannot run is refused by name, and the node keeps its rules.
	_, errOut, code := cli.Run(t, append(node, "patch", "mc", "--mode=no-reboot", "-p",
		"machine:\n  udev:\n    rules:\n      - KERNEL==\"vda\", RUN+=\"/bin/true\"\n")...)
	if code == 0 || !strings.Contains(errOut, "machine.udev.rules[3]") || !strings.Contains(errOut, "RUN+= is not supported") {
		t.Errorf("a RUN rule: exit %d, %s; want a refusal naming machine.udev.rules[3]", code, errOut)
	}

	// The rules removed, live: their links go.
	cli.Must(t, append(node, "patch", "mc", "--mode=no-reboot", "-p", "machine:\n  udev:\n    $patch: delete\n")...)

	testenv.WaitFor(t, "the rules' links gone", time.Minute, func() error {
		out := cli.Must(t, append(node, "ls", "/dev/talos-test")...)
		if strings.Contains(out, "renamed") || strings.Contains(out, "data-vda") {
			return fmt.Errorf("links stay:\n%s", out)
		}

		return nil
	})

	// ZswapConfig is refused because this kernel has no zswap.
	if out := waitFor("no zswap in the kernel", 30*time.Second, "", "ls", "/sys/module/zswap"); !strings.Contains(out, "no such file") {
		t.Errorf("ls /sys/module/zswap: %s, want no such file", out)
	}
}
