package metal

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/talos-go/talos/internal/testenv"
)

// talos.platform=nocloud with two network cards bonded (active-backup) and a VLAN on the bond,
// from a network-config v2 on a cidata ISO: the initramfs makes bond0 of eth0 and eth1 and
// vlan42 on it before addressing them. The bond carries the node's address (QEMU's user
// network forwards apid's port to it through eth0, the bond's active member); the VLAN's
// tagged frames go nowhere on that network, so its address is checked on the node only.
func TestNocloudBondVLAN(t *testing.T) {
	cli := testenv.CLI{Binary: filepath.Join(binDir, "talosctl"), Home: t.TempDir(), Timeout: 30 * time.Second}
	config, talosconfig := nocloudConfig(t, cli)

	dir := t.TempDir()
	files := map[string]string{
		"meta-data": "instance-id: iid-bond-1\nlocal-hostname: bond-1\n",
		"network-config": `version: 2
ethernets:
  eth0: {}
  eth1: {}
bonds:
  bond0:
    interfaces: [eth0, eth1]
    parameters:
      mode: active-backup
      mii-monitor-interval: 100
    addresses: [10.0.2.15/24]
    gateway4: 10.0.2.2
    nameservers:
      addresses: [10.0.2.3]
vlans:
  vlan42:
    id: 42
    link: bond0
    addresses: [192.168.42.15/24]
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
	m := bootWith(t, qemuOptions{args: []string{
		"-drive", "file=" + filepath.Join(dir, "cidata.iso") + ",media=cdrom,if=ide,readonly=on",
		"-nic", "user,model=virtio-net-pci,restrict=on,net=10.0.3.0/24", // eth1, the backup member
	}}, "talos.platform=nocloud")

	cli.TalosConfig = talosconfig
	ep := fmt.Sprintf("127.0.0.1:%d", m.port)

	took := waitAPID(t, m, cli, ep, start)
	t.Logf("nocloud bond and VLAN: apid answered on the bond's address %s after QEMU started (KVM %v)", took.Round(100*time.Millisecond), kvm)

	get := guestGet(t, cli, ep)

	field := func(doc, key string) string {
		if m := regexp.MustCompile(`(?m)^\s+` + key + `: (\S+)$`).FindStringSubmatch(doc); m != nil {
			return m[1]
		}

		return ""
	}

	bond := get("links", "bond0", "-o", "yaml")
	if field(bond, "kind") != "bond" || field(bond, "operationalState") != "up" {
		t.Errorf("bond0 is not an up bond:\n%s", bond)
	}

	for _, member := range []string{"eth0", "eth1"} {
		out := get("links", member, "-o", "yaml")
		if field(out, "slaveKind") != "bond" || field(out, "masterIndex") != field(bond, "index") {
			t.Errorf("%s is not a member of bond0 (index %s):\n%s", member, field(bond, "index"), out)
		}
	}

	vlan := get("links", "vlan42", "-o", "yaml")
	if field(vlan, "kind") != "vlan" || field(vlan, "operationalState") != "up" {
		t.Errorf("vlan42 is not an up VLAN:\n%s", vlan)
	}

	addresses := get("addresses")
	for _, want := range []string{`bond0/10\.0\.2\.15/24\s`, `vlan42/192\.168\.42\.15/24\s`} {
		if !regexp.MustCompile(want).MatchString(addresses) {
			t.Errorf("get addresses: no %s:\n%s", want, addresses)
		}
	}

	console := m.consoleText()
	for _, want := range []string{"bond bond0 created", "bond bond0: member eth0", "bond bond0: member eth1", "vlan vlan42 created", "bond0: 10.0.2.15/24", "vlan42: 192.168.42.15/24"} {
		if !strings.Contains(console, want) {
			t.Errorf("the console has no %q", want)
		}
	}
}
