package metal

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talos-go/talos/internal/platform"
	"github.com/talos-go/talos/internal/testenv"
)

// nocloudConfig generates a control plane config for a guest at 10.0.2.15 (time sync off: the
// guest reaches no NTP server) and returns its bytes and the talosconfig's path.
func nocloudConfig(t *testing.T, cli testenv.CLI) ([]byte, string) {
	t.Helper()

	dir := t.TempDir()
	cli.Must(t, "gen", "config", "nocloud-e2e", "https://10.0.2.15:6443", "--additional-sans", "127.0.0.1", "--output-dir", dir,
		"--config-patch", `[{"op":"add","path":"/machine/time","value":{"disabled":true}}]`)

	config, err := os.ReadFile(filepath.Join(dir, "controlplane.yaml"))
	if err != nil {
		t.Fatal(err)
	}

	return config, filepath.Join(dir, "talosconfig")
}

// waitAPID waits until apid answers with the config's certificates and returns how long it took
// from start.
func waitAPID(t *testing.T, m *machine, cli testenv.CLI, ep string, start time.Time) time.Duration {
	t.Helper()

	testenv.WaitFor(t, "apid with the user data's certificates", 6*time.Minute, func() error {
		if err := m.running(); err != nil {
			return err
		}

		if _, errOut, code := cli.Run(t, "-e", ep, "-n", "10.0.2.15", "get", "machinetype"); code != 0 {
			return fmt.Errorf("%s", errOut)
		}

		return nil
	})

	return time.Since(start)
}

// assertNocloudNode checks what every nocloud boot gives: the metadata, the hostname of
// meta-data, the address, a route of network-config, its name server, and the user data as
// the machine config (a control plane).
func assertNocloudNode(t *testing.T, cli testenv.CLI, ep, hostname, route string, metadata map[string]string) {
	t.Helper()

	get := guestGet(t, cli, ep)

	assertPlatformMetadata(t, get, metadata)

	var out string

	if out = get("hostnamestatus", "-o", "yaml"); !regexp.MustCompile(`(?m)^\s+hostname: ` + hostname + `$`).MatchString(out) {
		t.Errorf("hostnamestatus: not %s:\n%s", hostname, out)
	}

	if out = get("addresses"); !regexp.MustCompile(`(?m)eth0/10\.0\.2\.15/24\s`).MatchString(out) {
		t.Errorf("get addresses: no eth0/10.0.2.15/24:\n%s", out)
	}

	if out = get("routes"); !regexp.MustCompile(route).MatchString(out) {
		t.Errorf("get routes: no %s:\n%s", route, out)
	}

	// The config names no resolver and no lease gave one: the network-config's is used.
	if out = get("resolvers", "-o", "yaml"); !strings.Contains(out, "10.0.2.3") {
		t.Errorf("get resolvers: not network-config's 10.0.2.3:\n%s", out)
	}

	if out = get("machinetype"); !strings.Contains(out, "controlplane") {
		t.Errorf("the user data is not the machine config: machinetype\n%s", out)
	}
}

// talos.platform=nocloud, booted from nocloud's disk image, with a cidata ISO on an IDE CD-ROM
// drive, as Proxmox attaches it:
// meta-data names the host and the instance, network-config (v2, the card matched by its MAC)
// gives it a static address, a default route, a route and a name server, and user-data is the
// machine config. No DHCP runs.
func TestNocloudFromCIDATA(t *testing.T) {
	cli := testenv.CLI{Binary: filepath.Join(binDir, "talosctl"), Home: t.TempDir(), Timeout: 30 * time.Second}
	config, talosconfig := nocloudConfig(t, cli)

	dir := t.TempDir()
	files := map[string]string{
		"meta-data": "instance-id: iid-nocloud-1\nlocal-hostname: nocloud-1\ninstance-type: qemu-tcg\nregion: lab\nzone: rack-2\n",
		"network-config": `version: 2
ethernets:
  nic0:
    match:
      macaddress: "52:54:00:12:34:56"
    addresses: [10.0.2.15/24]
    gateway4: 10.0.2.2
    routes:
      - to: 10.0.99.0/24
        via: 10.0.2.2
        metric: 300
    nameservers:
      addresses: [10.0.2.3]
`,
		"user-data": string(config),
	}

	args := []string{"-as", "mkisofs", "-quiet", "-r", "-J", "-V", "cidata", "-o", filepath.Join(dir, "cidata.iso"), "-graft-points"}

	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}

		args = append(args, name+"="+filepath.Join(dir, name))
	}

	if out, err := exec.Command("xorriso", args...).CombinedOutput(); err != nil {
		t.Fatalf("xorriso (apt-get install xorriso): %v\n%s", err, out)
	}

	start := time.Now()
	m := bootWith(t, qemuOptions{disk: platformImage(t, platform.Nocloud), args: []string{"-drive", "file=" + filepath.Join(dir, "cidata.iso") + ",media=cdrom,if=ide,readonly=on"}})

	cli.TalosConfig = talosconfig
	ep := fmt.Sprintf("127.0.0.1:%d", m.port)

	took := waitAPID(t, m, cli, ep, start)
	t.Logf("nocloud from a cidata CD-ROM: apid answered with the user data's certificates %s after QEMU started (KVM %v)", took.Round(100*time.Millisecond), kvm)

	assertNocloudNode(t, cli, ep, "nocloud-1", `(?m)10\.0\.99\.0/24\s+10\.0\.2\.2\s+eth0\s+300`, map[string]string{
		"platform": "nocloud", "hostname": "nocloud-1", "instanceId": "iid-nocloud-1", "instanceType": "qemu-tcg", "region": "lab", "zone": "rack-2",
	})

	console := m.consoleText()
	for _, want := range []string{
		"nocloud: read meta-data, network-config, user-data from the cidata volume /dev/sr0", "talos.platform=nocloud: the machine config is the platform's user data",
		"eth0: 10.0.2.15/24", "route to 10.0.99.0/24 via 10.0.2.2 (metric 300)",
	} {
		if !strings.Contains(console, want) {
			t.Errorf("the console has no %q", want)
		}
	}

	if strings.Contains(console, "DHCP on eth0") {
		t.Errorf("DHCP ran on eth0, which network-config gives a static address")
	}
}

// The seed in the SMBIOS system serial, ds=nocloud;s=<url>: the node brings its network up by
// DHCP, fetches meta-data, network-config (v1 this time) and user-data from the test's HTTP
// server, and applies them.
func TestNocloudFromSMBIOSSeed(t *testing.T) {
	cli := testenv.CLI{Binary: filepath.Join(binDir, "talosctl"), Home: t.TempDir(), Timeout: 30 * time.Second}
	config, talosconfig := nocloudConfig(t, cli)

	docs := map[string]string{
		"/seed/meta-data": "instance-id: iid-seed-1\nlocal-hostname: nocloud-seed-1\n",
		"/seed/network-config": `version: 1
config:
  - type: physical
    name: eth0
    subnets:
      - type: static
        address: 10.0.2.15
        netmask: 255.255.255.0
        gateway: 10.0.2.2
        routes:
          - network: 10.0.98.0
            netmask: 255.255.255.0
            gateway: 10.0.2.2
            metric: 400
  - type: nameserver
    address: [10.0.2.3]
`,
		"/seed/user-data": string(config),
	}

	var (
		mu     sync.Mutex
		served []string
	)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}

	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		served = append(served, r.URL.Path)
		mu.Unlock()

		body, ok := docs[r.URL.Path]
		if !ok {
			http.NotFound(w, r)

			return
		}

		w.Write([]byte(body))
	}), ReadHeaderTimeout: 10 * time.Second}

	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })

	_, port, _ := net.SplitHostPort(l.Addr().String())

	start := time.Now()
	m := bootWith(t, qemuOptions{open: true, args: []string{"-smbios", "type=1,serial=ds=nocloud;s=http://10.0.2.2:" + port + "/seed"}}, "talos.platform=nocloud")

	cli.TalosConfig = talosconfig
	ep := fmt.Sprintf("127.0.0.1:%d", m.port)

	took := waitAPID(t, m, cli, ep, start)
	t.Logf("nocloud from an SMBIOS seed over HTTP: apid answered %s after QEMU started (KVM %v)", took.Round(100*time.Millisecond), kvm)

	assertNocloudNode(t, cli, ep, "nocloud-seed-1", `(?m)10\.0\.98\.0/24\s+10\.0\.2\.2\s+eth0\s+400`, map[string]string{
		"platform": "nocloud", "hostname": "nocloud-seed-1", "instanceId": "iid-seed-1",
	})

	mu.Lock()
	defer mu.Unlock()

	for path := range docs {
		if !strings.Contains(strings.Join(served, " "), path) {
			t.Errorf("the node did not fetch %s (served %v)", path, served)
		}
	}

	if console := m.consoleText(); !strings.Contains(console, "nocloud: seed http://10.0.2.2:"+port+"/seed/ from the SMBIOS system serial") ||
		!strings.Contains(console, "nocloud: read meta-data, network-config, user-data from http://10.0.2.2:"+port+"/seed/") {
		t.Errorf("the console does not name the seed and what it read from it")
	}
}

// An unknown talos.platform= stops the boot with the platforms this node knows.
func TestUnknownPlatformStopsTheBoot(t *testing.T) {
	m := boot(t, "talos.platform=no-such-cloud")

	select {
	case <-m.exited:
	case <-time.After(3 * time.Minute):
		t.Fatal("QEMU still runs: the init did not stop on an unknown platform")
	}

	if console := m.consoleText(); !strings.Contains(console, `talos.platform="no-such-cloud" is not a platform this node boots on: give one of `+strings.Join(platform.Known, ", ")) {
		t.Fatalf("the console does not name the unknown platform and the known ones")
	}
}
