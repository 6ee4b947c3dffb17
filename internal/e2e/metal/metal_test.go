// Package metal boots the metal boot assets of `make boot` under QEMU (KVM when /dev/kvm works,
// TCG otherwise): machined is PID 1 on Debian's cloud kernel, and talosctl reaches its API
// through QEMU's user network (restricted: the guest reaches nothing but the forwarded port).
// The suite is skipped when QEMU or the assets are missing; .ci/run builds them.
package metal

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/talos-go/talos/internal/container/netnstest"
	"github.com/talos-go/talos/internal/metal"
	"github.com/talos-go/talos/internal/provision/qemu/vm"
	"github.com/talos-go/talos/internal/testenv"
)

var (
	binDir, kernel, initramfs, iso, uki, diskImage string
	kvm                                            bool // KVM works here: /dev/kvm is there and a guest runs on it
)

func TestMain(m *testing.M) {
	// As root the suite runs in a network namespace of its own: a guest whose network is open
	// (QEMU's user network unrestricted, to reach the test's NTP and config servers on the
	// host's loopback) then reaches nothing else, whatever it asks for (its default NTP server
	// and resolvers before its config names others).
	if code, done := netnstest.Isolate(); done {
		os.Exit(code)
	}

	os.Exit(run(m))
}

func run(m *testing.M) int {
	if reason := skipReason(); reason != "" {
		return testenv.SkipSuite("metal e2e suite", reason)
	}

	var err error
	if binDir, err = os.MkdirTemp("", "metal-e2e-"); err != nil {
		fmt.Fprintln(os.Stderr, err)

		return 1
	}
	defer os.RemoveAll(binDir)

	if out, err := testenv.GoBuild("-o", binDir+"/", "github.com/talos-go/talos/cmd/talosctl", "github.com/talos-go/talos/cmd/machined", "github.com/talos-go/talos/cmd/imager"); err != nil {
		fmt.Fprintf(os.Stderr, "building talosctl, machined and imager: %v\n%s", err, out)

		return 1
	}

	kvm = vm.KVMWorks(kernel)
	fmt.Fprintf(os.Stderr, "metal e2e: QEMU with KVM: %v\n", kvm)

	return m.Run()
}

func skipReason() string {
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		return "no qemu-system-x86_64 (apt-get install qemu-system-x86)"
	}

	dir, err := filepath.Abs("../../../_out/boot")
	if err != nil {
		return err.Error()
	}

	kernel, initramfs, iso = filepath.Join(dir, "vmlinuz"), filepath.Join(dir, "initramfs.img"), filepath.Join(dir, "metal-amd64.iso")
	uki = filepath.Join(dir, "metal-amd64-uki.efi")
	diskImage = filepath.Join(dir, "metal-amd64.raw")

	for _, f := range []string{kernel, initramfs, iso, uki, diskImage} {
		if _, err := os.Stat(f); err != nil {
			return fmt.Sprintf("no %s: build the boot assets with `make boot`", f)
		}
	}

	return ""
}

// machine is one QEMU guest booted from the boot assets.
type machine struct {
	cmd     *exec.Cmd
	console string // the serial console's log
	port    int    // the host port forwarded to the guest's apid
	stderr  strings.Builder
	exited  chan struct{} // closed when QEMU ends
}

// boot starts a guest with the kernel arguments args (after `make boot`'s defaults: the
// platform, the KSPP arguments and the console) and stops it when the test ends. Its first
// network card is on QEMU's user network 10.0.2.0/24 (DHCP from 10.0.2.2), with the guest's port
// 50000 forwarded to the host; restricted, the guest reaches nothing else.
func boot(t testing.TB, args ...string) *machine {
	return bootWith(t, qemuOptions{}, args...)
}

// qemuOptions are what a test changes of the guest's machine.
type qemuOptions struct {
	args       []string // more QEMU arguments (another network card, say)
	open       bool     // the guest reaches the host's loopback at 10.0.2.2 (the test's servers)
	noDefaults bool     // only args as kernel arguments, not the defaults
	// disk boots this disk image (its GRUB, with the image's kernel arguments) instead of the
	// kernel and initramfs; the guest's writes go to a temporary overlay, not to it.
	disk string
}

func bootWith(t testing.TB, o qemuOptions, args ...string) *machine {
	t.Helper()

	if o.open && !netnstest.Own() {
		t.Skip("an open guest network needs a network namespace of its own (run as root): the guest must reach nothing but the test's servers")
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}

	port := l.Addr().(*net.TCPAddr).Port
	l.Close()

	m := &machine{console: filepath.Join(t.TempDir(), "console.log"), port: port, exited: make(chan struct{})}

	cmdline := append([]string{"panic=-1"}, args...)
	if !o.noDefaults {
		cmdline = append(slices.Clone(metal.DefaultKernelArgs), cmdline...)
	}

	restrict := "on"
	if o.open {
		restrict = "off"
	}

	bootArgs := []string{"-kernel", kernel, "-initrd", initramfs, "-append", strings.Join(cmdline, " ")}
	if o.disk != "" {
		format := "raw"

		switch {
		case strings.HasSuffix(o.disk, ".qcow2"):
			format = "qcow2"
		case strings.HasSuffix(o.disk, ".vhd"):
			format = "vpc" // QEMU's name for VHD
		}

		bootArgs = []string{"-drive", "file=" + o.disk + ",format=" + format + ",if=virtio,snapshot=on"}
	}

	qemu := []string{
		"-m", "2048", "-smp", "2", "-display", "none", "-no-reboot",
		"-serial", "file:" + m.console,
	}
	qemu = append(qemu, bootArgs...)
	qemu = append(qemu,
		"-nic", fmt.Sprintf("user,model=virtio-net-pci,restrict=%s,hostfwd=tcp:127.0.0.1:%d-:50000", restrict, port),
		// The host's entropy: without it TCG's kernel takes long to seed its random numbers,
		// which DHCP's transaction IDs and TLS wait for.
		"-device", "virtio-rng-pci",
	)
	if kvm {
		qemu = append(qemu, "-enable-kvm", "-cpu", "host")
	}

	qemu = append(qemu, o.args...)

	m.cmd = exec.Command("qemu-system-x86_64", qemu...)
	m.cmd.Stdout, m.cmd.Stderr = &m.stderr, &m.stderr

	if err = m.cmd.Start(); err != nil {
		t.Fatal(err)
	}

	go func() {
		_ = m.cmd.Wait()
		close(m.exited)
	}()

	t.Cleanup(func() {
		_ = m.cmd.Process.Kill()
		<-m.exited

		if t.Failed() {
			b, _ := os.ReadFile(m.console)
			t.Logf("QEMU: %s\nconsole:\n%s", m.stderr.String(), b)
		}
	})

	return m
}

// running is an error once QEMU has ended, with what it said.
func (m *machine) running() error {
	select {
	case <-m.exited:
		return fmt.Errorf("QEMU exited: %s", m.stderr.String())
	default:
		return nil
	}
}

func (m *machine) consoleText() string {
	b, _ := os.ReadFile(m.console)

	return string(b)
}

// talosctl runs talosctl against the guest's maintenance API.
func (m *machine) talosctl(t testing.TB, args ...string) (string, string, int) {
	ep := fmt.Sprintf("127.0.0.1:%d", m.port)
	cli := testenv.CLI{Binary: filepath.Join(binDir, "talosctl"), Home: t.TempDir(), Timeout: 30 * time.Second}

	return cli.Run(t, append([]string{"-e", ep, "-n", ep}, append(args, "--insecure")...)...)
}

// A node with no config boots as PID 1 from the initramfs into the node image, configures the
// address of ip= and waits in maintenance mode, where talosctl reaches it.
func TestBootToMaintenance(t *testing.T) {
	start := time.Now()
	m := boot(t, "ip=10.0.2.15::10.0.2.2:255.255.255.0:metal-1:eth0:off")

	waitMaintenance(t, m)
	t.Logf("booted to maintenance mode in %s", time.Since(start).Round(100*time.Millisecond))

	console := m.consoleText()
	for _, want := range []string{"Run /init as init process", "[talos] switched to the node image", "maintenance API serving"} {
		if !strings.Contains(console, want) {
			t.Errorf("the console has no %q", want)
		}
	}

	// The boot's modules were loaded from the initramfs: virtio_net for the guest's network
	// card, found by its modalias.
	if !regexp.MustCompile(`\[talos\] kernel \S+: loaded .*for the devices, .*virtio_net`).MatchString(console) {
		t.Errorf("no virtio_net loaded for the network card")
	}

	out, errOut, code := m.talosctl(t, "get", "addresses")
	if code != 0 || !regexp.MustCompile(`(?m)eth0/10\.0\.2\.15/24\s`).MatchString(out) {
		t.Fatalf("get addresses: exit %d, no eth0/10.0.2.15/24 of ip=:\n%s%s", code, out, errOut)
	}

	// ip='s gateway is the default route.
	if out, errOut, code = m.talosctl(t, "get", "routes"); code != 0 || !regexp.MustCompile(`(?m)\s10\.0\.2\.2\s`).MatchString(out) {
		t.Errorf("get routes: exit %d, no route through ip='s gateway 10.0.2.2:\n%s%s", code, out, errOut)
	}

	// The guest's own kernel, not the host's: its loop device holds the node image.
	if out, _, _ = m.talosctl(t, "get", "disks"); !strings.Contains(out, "loop0") {
		t.Errorf("get disks shows no loop0 for the node image:\n%s", out)
	}
}

// A config applied in maintenance mode starts the node on its kernel (kept in memory: installing
// to a disk is not done yet): apid answers with mTLS, machined is PID 1, and it set the KSPP
// kernel parameters, which `get kernelparamstatus` reports. The guest reaches no NTP server, so
// the config disables time sync (the services wait for it otherwise, as upstream's).
func TestApplyConfigRunsTheNode(t *testing.T) {
	m := boot(t, "ip=10.0.2.15::10.0.2.2:255.255.255.0:metal-1:eth0:off")
	waitMaintenance(t, m)

	dir := t.TempDir()
	cli := testenv.CLI{Binary: filepath.Join(binDir, "talosctl"), Home: t.TempDir(), Timeout: 30 * time.Second}
	cli.Must(t, "gen", "config", "metal-e2e", "https://10.0.2.15:6443", "--additional-sans", "127.0.0.1", "--output-dir", dir,
		"--config-patch", `[{"op":"add","path":"/machine/time","value":{"disabled":true}}]`)

	if out, errOut, code := m.talosctl(t, "apply-config", "-f", filepath.Join(dir, "controlplane.yaml")); code != 0 {
		t.Fatalf("apply-config: exit %d\n%s%s", code, out, errOut)
	}

	// From now on with the cluster's client certificate, to the node by its own address.
	cli.TalosConfig = filepath.Join(dir, "talosconfig")
	ep := fmt.Sprintf("127.0.0.1:%d", m.port)

	var params string

	testenv.WaitFor(t, "apid with the config's certificates", 4*time.Minute, func() error {
		out, errOut, code := cli.Run(t, "-e", ep, "-n", "10.0.2.15", "get", "kernelparamstatus", "-o", "yaml")
		if code != 0 {
			return fmt.Errorf("%s", errOut)
		}

		params = out

		return nil
	})

	for key, want := range map[string]string{"kernel.kptr_restrict": "1", "kernel.dmesg_restrict": "1", "net.core.bpf_jit_harden": "2", "vm.overcommit_memory": "1"} {
		if !regexp.MustCompile(`(?s)id: ` + regexp.QuoteMeta("proc.sys."+key) + `\n.*?current: "` + want + `"`).MatchString(params) {
			t.Errorf("kernelparamstatus: %s is not %s:\n%.3000s", key, want, params)
		}
	}

	if out := cli.Must(t, "-e", ep, "-n", "10.0.2.15", "read", "/proc/sys/kernel/kptr_restrict"); strings.TrimSpace(out) != "1" {
		t.Errorf("the guest's kernel.kptr_restrict is %q", out)
	}

	if out := cli.Must(t, "-e", ep, "-n", "10.0.2.15", "processes"); !regexp.MustCompile(`(?m)^10\.0\.2\.15\s+1\s+.*/sbin/init --platform metal`).MatchString(out) {
		t.Errorf("PID 1 is not machined on metal:\n%s", out)
	}

	// Shutdown stops the services, then machined powers the machine off with reboot(2): QEMU
	// ends.
	cli.Must(t, "-e", ep, "-n", "10.0.2.15", "shutdown", "--wait=false")

	select {
	case <-m.exited:
	case <-time.After(3 * time.Minute):
		t.Fatal("the machine still runs 3 minutes after shutdown")
	}

	if console := m.consoleText(); !strings.Contains(console, "reboot: Power down") {
		t.Errorf("the kernel did not power down:\n%s", console[max(0, len(console)-3000):])
	}
}

// Without ip=, DHCPv4 runs on every link but the ignored ones: the first card gets QEMU's
// lease, the second, on a network of its own, is ignored by talos.network.interface.ignore.
func TestDHCPOnEveryLinkNotIgnored(t *testing.T) {
	m := bootWith(t, qemuOptions{args: []string{"-nic", "user,model=virtio-net-pci,restrict=on,net=10.0.3.0/24"}}, "talos.network.interface.ignore=eth1")

	waitMaintenance(t, m)

	// QEMU's restricted network offers no router: the lease has none.
	if !regexp.MustCompile(`\[talos\] DHCP on eth0: 10\.0\.2\.15/24, gateway none, lease 24h0m0s`).MatchString(m.consoleText()) {
		t.Errorf("the console shows no lease for eth0")
	}

	out, errOut, code := m.talosctl(t, "get", "addresses")
	if code != 0 || !regexp.MustCompile(`(?m)eth0/10\.0\.2\.15/24\s`).MatchString(out) {
		t.Fatalf("get addresses: exit %d, no DHCP address on eth0:\n%s%s", code, out, errOut)
	}

	if strings.Contains(out, "10.0.3.") {
		t.Fatalf("the ignored eth1 has an address:\n%s", out)
	}
}

// waitMaintenance waits until the guest's maintenance API answers.
func waitMaintenance(t testing.TB, m *machine) {
	t.Helper()

	testenv.WaitFor(t, "the maintenance API", 4*time.Minute, func() error {
		if err := m.running(); err != nil {
			return err
		}

		if _, errOut, code := m.talosctl(t, "version"); code != 0 {
			return fmt.Errorf("%s", errOut)
		}

		return nil
	})
}

// A bad ip= stops the boot with a message naming it on the console; the kernel panics (the
// init exited) and, with panic=-1, the machine resets, which ends QEMU under -no-reboot.
func TestBadIPArgumentStopsTheBoot(t *testing.T) {
	m := boot(t, "ip=10.0.2.15::10.0.2.999:255.255.255.0::eth0:off")

	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()

	select {
	case <-m.exited:
	case <-ctx.Done():
		t.Fatal("QEMU still runs: the init did not stop on a bad ip=")
	}

	console := m.consoleText()
	if !strings.Contains(console, `ip=: gateway "10.0.2.999" is not an IP address`) {
		t.Fatalf("the console does not name the bad gateway of ip=")
	}

	if !strings.Contains(console, "Attempted to kill init") {
		t.Errorf("no kernel panic for the init's exit")
	}
}

// talos.config=metal-iso with no such volume stops the boot with what to attach.
func TestMissingMetalISOStopsTheBoot(t *testing.T) {
	m := boot(t, "ip=10.0.2.15::10.0.2.2:255.255.255.0::eth0:off", "talos.config=metal-iso")

	select {
	case <-m.exited:
	case <-time.After(3 * time.Minute):
		t.Fatal("QEMU still runs: the init did not stop without a metal-iso volume")
	}

	if console := m.consoleText(); !strings.Contains(console, "talos.config=metal-iso: no ISO 9660 volume labelled metal-iso (attach one with config.yaml at its root") {
		t.Fatalf("the console does not say the metal-iso volume is missing")
	}
}

// A boot without the KSPP kernel arguments stops with a message naming the missing ones.
func TestMissingKSPPArgumentsStopTheBoot(t *testing.T) {
	m := bootWith(t, qemuOptions{noDefaults: true}, "console=ttyS0", "talos.platform=metal", "init_on_alloc=1")

	select {
	case <-m.exited:
	case <-time.After(3 * time.Minute):
		t.Fatal("QEMU still runs: the init did not stop without the KSPP arguments")
	}

	if console := m.consoleText(); !strings.Contains(console, "lacks the KSPP arguments slab_nomerge pti=on") {
		t.Fatalf("the console does not name the missing KSPP arguments")
	}
}

// The first boot's config comes from talos.config= (a URL with ${hostname}), served by the
// test. The guest's clock starts two years behind (its RTC); the config names the test's NTP
// server, and the node steps its clock before its services start. apid's certificate, checked
// against the host's clock, is then valid, `get timestatus` is synced and the node's clock is
// the server's.
func TestConfigFromURLAndTimeSync(t *testing.T) {
	cli := testenv.CLI{Binary: filepath.Join(binDir, "talosctl"), Home: t.TempDir(), Timeout: 30 * time.Second}
	src := serveConfig(t, cli)
	_, ntpPort, _ := net.SplitHostPort(src.ntp.Addr)

	m := bootWith(t, qemuOptions{open: true, args: []string{"-rtc", "base=" + time.Now().UTC().AddDate(-2, 0, 0).Format("2006-01-02T15:04:05")}},
		"ip=10.0.2.15::10.0.2.2:255.255.255.0:metal-1:eth0:off", "talos.config="+src.arg)

	cli.TalosConfig = src.talosconfig
	ep := fmt.Sprintf("127.0.0.1:%d", m.port)

	testenv.WaitFor(t, "apid with a certificate valid now", 4*time.Minute, func() error {
		if err := m.running(); err != nil {
			return err
		}

		out, errOut, code := cli.Run(t, "-e", ep, "-n", "10.0.2.15", "get", "timestatus", "-o", "yaml")
		if code != 0 {
			return fmt.Errorf("%s", errOut)
		}

		if !strings.Contains(out, "synced: true") || !strings.Contains(out, "syncDisabled: false") {
			return fmt.Errorf("not synced:\n%s", out)
		}

		return nil
	})

	if src.served.Load() == 0 {
		t.Errorf("the config server was not asked")
	}

	console := m.consoleText()
	if !strings.Contains(console, "talos.config: downloaded the machine config from "+strings.ReplaceAll(src.arg, "${hostname}", "metal-1")) {
		t.Errorf("the console shows no download of the config")
	}

	if !regexp.MustCompile(`time synced.*"server": "10\.0\.2\.2:` + ntpPort).MatchString(console) {
		t.Errorf("the console shows no sync from the test's NTP server")
	}

	if src.ntp.Requests() == 0 {
		t.Errorf("the NTP server was not asked")
	}

	if out := cli.Must(t, "-e", ep, "-n", "10.0.2.15", "get", "timeservers"); !strings.Contains(out, "10.0.2.2:"+ntpPort) {
		t.Errorf("get timeservers:\n%s", out)
	}

	// talosctl time: the node's clock beside the server's, both within a minute of the host's.
	out := cli.Must(t, "-e", ep, "-n", "10.0.2.15", "time")

	fields := strings.Fields(strings.Split(strings.TrimSpace(out), "\n")[1])
	if len(fields) != 4 {
		t.Fatalf("talosctl time:\n%s", out)
	}

	for _, f := range fields[2:] {
		at, err := time.Parse(time.RFC3339Nano, f)
		if err != nil || time.Since(at).Abs() > time.Minute {
			t.Errorf("talosctl time shows %s, not the host's time:\n%s", f, out)
		}
	}
}

// configSource is a control plane config served to the guest over HTTP, whose time server is
// an NTP server the test runs; both are on the host's loopback, 10.0.2.2 from an open guest.
type configSource struct {
	arg         string // talos.config's value (with ${hostname}: the guest's is metal-1)
	talosconfig string
	ntp         *testenv.NTPServer
	served      *atomic.Int32 // how many times the config was served
}

func serveConfig(t testing.TB, cli testenv.CLI, patches ...string) configSource {
	t.Helper()

	src := configSource{ntp: testenv.StartNTPServer(t, "127.0.0.1:0", 0), served: &atomic.Int32{}}
	_, ntpPort, _ := net.SplitHostPort(src.ntp.Addr)

	dir := t.TempDir()
	args := []string{"gen", "config", "metal-e2e", "https://10.0.2.15:6443", "--additional-sans", "127.0.0.1", "--output-dir", dir,
		"--config-patch", `[{"op":"add","path":"/machine/time","value":{"servers":["10.0.2.2:` + ntpPort + `"]}}]`}
	for _, p := range patches {
		args = append(args, "--config-patch", p)
	}

	cli.Must(t, args...)
	src.talosconfig = filepath.Join(dir, "talosconfig")

	config, err := os.ReadFile(filepath.Join(dir, "controlplane.yaml"))
	if err != nil {
		t.Fatal(err)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}

	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metal-1.yaml" {
			http.NotFound(w, r)

			return
		}

		src.served.Add(1)
		w.Write(config)
	}), ReadHeaderTimeout: 10 * time.Second}

	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })

	_, httpPort, _ := net.SplitHostPort(l.Addr().String())
	src.arg = "http://10.0.2.2:" + httpPort + "/${hostname}.yaml"

	return src
}

// machine.network on metal: the config gives the second card (ignored by the boot's DHCP) an
// address, an MTU and a route, makes a dummy link with an address, and names a resolver. The
// node sets them on its kernel and reports the specs and the statuses; the host DNS forwards to
// the configured resolver.
func TestNetworkFromConfig(t *testing.T) {
	cli := testenv.CLI{Binary: filepath.Join(binDir, "talosctl"), Home: t.TempDir(), Timeout: 30 * time.Second}
	src := serveConfig(t, cli, `machine:
  network:
    nameservers: [10.0.2.3]
    interfaces:
      - interface: eth1
        mtu: 1400
        addresses: [10.0.3.20/24]
        routes:
          - network: 192.168.50.0/24
            gateway: 10.0.3.2
      - interface: dummy0
        dummy: true
        addresses: [10.0.9.1/32]
`)

	m := bootWith(t, qemuOptions{open: true, args: []string{"-nic", "user,model=virtio-net-pci,restrict=on,net=10.0.3.0/24"}},
		"ip=10.0.2.15::10.0.2.2:255.255.255.0:metal-1:eth0:off", "talos.network.interface.ignore=eth1", "talos.config="+src.arg)

	cli.TalosConfig = src.talosconfig
	ep := fmt.Sprintf("127.0.0.1:%d", m.port)
	get := func(args ...string) (string, error) {
		out, errOut, code := cli.Run(t, append([]string{"-e", ep, "-n", "10.0.2.15", "get"}, args...)...)
		if code != 0 {
			return "", fmt.Errorf("%s", errOut)
		}

		return out, nil
	}

	testenv.WaitFor(t, "eth1's address from the config", 4*time.Minute, func() error {
		if err := m.running(); err != nil {
			return err
		}

		out, err := get("addresses")
		if err != nil {
			return err
		}

		if !regexp.MustCompile(`(?m)eth1/10\.0\.3\.20/24\s`).MatchString(out) {
			return fmt.Errorf("no eth1/10.0.3.20/24:\n%s", out)
		}

		return nil
	})

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"addressspecs"}, `eth1/10\.0\.3\.20/24`},
		{[]string{"linkspecs", "eth1", "-o", "yaml"}, `mtu: 1400`},
		{[]string{"routespecs"}, `inet4/10\.0\.3\.2/192\.168\.50\.0/24/1024`},
		{[]string{"links", "eth1", "-o", "yaml"}, `mtu: 1400`},
		{[]string{"routes"}, `192\.168\.50\.0/24\s+10\.0\.3\.2\s`},
		{[]string{"resolvers", "-o", "yaml"}, `- 10\.0\.2\.3`},
		// machine.network.interfaces[].dummy: the kernel's dummy link, with its address.
		{[]string{"links", "dummy0", "-o", "yaml"}, `kind: dummy`},
		{[]string{"addresses"}, `dummy0/10\.0\.9\.1/32`},
	} {
		testenv.WaitFor(t, strings.Join(c.args, " "), 30*time.Second, func() error {
			out, err := get(c.args...)
			if err != nil {
				return err
			}

			if !regexp.MustCompile(c.want).MatchString(out) {
				return fmt.Errorf("no %s in:\n%s", c.want, out)
			}

			return nil
		})
	}

	// The host DNS serves on the node, forwarding to the configured resolver.
	if out := cli.Must(t, "-e", ep, "-n", "10.0.2.15", "read", "/etc/resolv.conf"); !strings.Contains(out, "nameserver 127.0.0.53") {
		t.Errorf("/etc/resolv.conf does not name the host DNS:\n%s", out)
	}
}

// A bond of two cards, a VLAN and a bridge from machine.network.interfaces: machined loads the
// bonding, 8021q and bridge modules (carried by the initramfs), makes bond0 with the two cards
// its deviceSelectors pick as its members, eth0.100 on eth0 and br0 with the third card, and gives them their addresses;
// the guest's kernel reports them.
func TestBondAndVLANFromConfig(t *testing.T) {
	cli := testenv.CLI{Binary: filepath.Join(binDir, "talosctl"), Home: t.TempDir(), Timeout: 30 * time.Second}
	src := serveConfig(t, cli, `machine:
  network:
    interfaces:
      - interface: bond0
        addresses: [10.9.7.5/24]
        bond:
          deviceSelectors: # QEMU numbers the cards' addresses from 52:54:00:12:34:56
            - hardwareAddr: "52:54:00:12:34:57"
              physical: true
            - hardwareAddr: "52:54:00:12:34:58"
              driver: virtio*
              physical: true
          mode: active-backup
          miimon: 100
      - interface: eth0
        vlans:
          - vlanId: 100
            addresses: [10.100.0.5/24]
      - interface: br0
        addresses: [10.9.8.5/24]
        bridge:
          interfaces: [eth3]
          stp:
            enabled: true
`)

	card := []string{"-nic", "user,model=virtio-net-pci,restrict=on,net=10.0.3.0/24"}
	m := bootWith(t, qemuOptions{open: true, args: slices.Concat(card, card, card)},
		"ip=10.0.2.15::10.0.2.2:255.255.255.0:metal-1:eth0:off", "talos.config="+src.arg)

	cli.TalosConfig = src.talosconfig
	ep := fmt.Sprintf("127.0.0.1:%d", m.port)

	testenv.WaitFor(t, "the bond's and the VLAN's addresses", 4*time.Minute, func() error {
		if err := m.running(); err != nil {
			return err
		}

		out, errOut, code := cli.Run(t, "-e", ep, "-n", "10.0.2.15", "get", "addresses")
		if code != 0 {
			return fmt.Errorf("%s", errOut)
		}

		for _, want := range []string{`bond0/10\.9\.7\.5/24`, `eth0\.100/10\.100\.0\.5/24`, `br0/10\.9\.8\.5/24`} {
			if !regexp.MustCompile(`(?m)` + want + `\s`).MatchString(out) {
				return fmt.Errorf("no %s:\n%s", want, out)
			}
		}

		return nil
	})

	bond := cli.Must(t, "-e", ep, "-n", "10.0.2.15", "read", "/proc/net/bonding/bond0")
	for _, want := range []string{"Bonding Mode: fault-tolerance (active-backup)", "MII Polling Interval (ms): 100", "Slave Interface: eth1", "Slave Interface: eth2"} {
		if !strings.Contains(bond, want) {
			t.Errorf("the guest's bond0 has no %q:\n%s", want, bond)
		}
	}

	if vlan := cli.Must(t, "-e", ep, "-n", "10.0.2.15", "read", "/proc/net/vlan/config"); !regexp.MustCompile(`eth0\.100\s+\|\s+100\s+\|\s+eth0`).MatchString(vlan) {
		t.Errorf("the guest's VLANs:\n%s", vlan)
	}

	// The cards' statuses show what the selectors match.
	if link := cli.Must(t, "-e", ep, "-n", "10.0.2.15", "get", "links", "eth1", "-o", "yaml"); !strings.Contains(link, "driver: virtio_net") ||
		!regexp.MustCompile(`busPath: "?0000:00:0[0-9a-f]\.0`).MatchString(link) || !strings.Contains(link, "pciID: 1AF4:1000") {
		t.Errorf("eth1's status has no driver, bus path or PCI ID:\n%s", link)
	}

	if stp := cli.Must(t, "-e", ep, "-n", "10.0.2.15", "read", "/sys/class/net/br0/bridge/stp_state"); strings.TrimSpace(stp) != "1" {
		t.Errorf("br0's spanning tree: %q", stp)
	}

	if ports := cli.Must(t, "-e", ep, "-n", "10.0.2.15", "list", "/sys/class/net/br0/brif"); !strings.Contains(ports, "eth3") {
		t.Errorf("br0's ports:\n%s", ports)
	}
}
