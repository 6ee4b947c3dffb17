package metal

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talos-go/talos/internal/testenv"
)

// openstackNetworkData is a network_data.json for QEMU's first card (its MAC): a static
// 10.0.2.15/24, the default route given as a route to 0.0.0.0/0.0.0.0, a route to extra and a
// DNS service.
func openstackNetworkData(extra string) string {
	return `{
  "links": [{"id": "tap0e1f2a3b-4c", "vif_id": "0e1f2a3b-4c5d-4e6f-8a9b-0c1d2e3f4a5b", "type": "ovs", "ethernet_mac_address": "52:54:00:12:34:56", "mtu": 1500}],
  "networks": [{
    "id": "network0", "type": "ipv4", "link": "tap0e1f2a3b-4c", "ip_address": "10.0.2.15", "netmask": "255.255.255.0",
    "routes": [
      {"network": "0.0.0.0", "netmask": "0.0.0.0", "gateway": "10.0.2.2"},
      {"network": "` + extra + `", "netmask": "255.255.255.0", "gateway": "10.0.2.2"}
    ],
    "network_id": "7a8b9c0d-1e2f-4a3b-8c4d-5e6f7a8b9c0d"
  }],
  "services": [{"type": "dns", "address": "10.0.2.3"}]
}`
}

// openstackBondMAC is the MAC network_data.json gives the bond of openstackBondNetworkData,
// which is not its member card's.
const openstackBondMAC = "fa:16:3e:4d:2c:01"

// openstackBondNetworkData is a network_data.json as Nova writes one for a bonded port: QEMU's
// card (by its MAC) the only member of bond0 (active-backup), the bond with its own
// ethernet_mac_address and QEMU's address, a route to 10.0.97.0/24 and a resolver on it.
func openstackBondNetworkData() string {
	return `{
  "links": [
    {"id": "port0", "type": "phy", "ethernet_mac_address": "52:54:00:12:34:56", "mtu": 1500},
    {"id": "bond-a", "type": "bond", "ethernet_mac_address": "` + openstackBondMAC + `", "bond_links": ["port0"], "bond_mode": "active-backup", "bond_miimon": 100, "mtu": 1500}
  ],
  "networks": [{
    "id": "network0", "type": "ipv4", "link": "bond-a", "ip_address": "10.0.2.15", "netmask": "255.255.255.0",
    "routes": [
      {"network": "0.0.0.0", "netmask": "0.0.0.0", "gateway": "10.0.2.2"},
      {"network": "10.0.97.0", "netmask": "255.255.255.0", "gateway": "10.0.2.2"}
    ]
  }],
  "services": [{"type": "dns", "address": "10.0.2.3"}]
}`
}

// openstackConfigDrive writes a config drive (ISO 9660 labelled config-2) and returns its path:
// meta_data.json names the host openstack-1, the instance, its zone nova-az1 and type m1.tcg,
// network_data.json gives QEMU's card 10.0.2.15/24 and a route to 10.0.97.0/24, and user_data
// is config.
func openstackConfigDrive(t *testing.T, config []byte) string {
	t.Helper()

	return openstackConfigDriveWith(t, config, openstackNetworkData("10.0.97.0"))
}

// openstackConfigDriveWith is openstackConfigDrive with networkData as network_data.json.
func openstackConfigDriveWith(t *testing.T, config []byte, networkData string) string {
	t.Helper()

	dir := t.TempDir()
	files := map[string]string{
		"openstack/latest/meta_data.json": `{"uuid": "3f9e8d7c-6b5a-4e3d-9c2b-1a0f9e8d7c6b", "hostname": "openstack-1", "name": "openstack-1",
  "availability_zone": "nova-az1", "instance_type": "m1.tcg", "project_id": "4e5f6a7b8c9d4e0f", "launch_index": 0, "devices": [], "public_keys": {}}`,
		"openstack/latest/network_data.json": networkData,
		"openstack/latest/user_data":         string(config),
	}

	iso := filepath.Join(dir, "config-2.iso")
	args := []string{"-as", "mkisofs", "-quiet", "-r", "-J", "-V", "config-2", "-o", iso, "-graft-points"}

	for name, body := range files {
		path := filepath.Join(dir, filepath.Base(name))
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}

		args = append(args, name+"="+path)
	}

	if out, err := exec.Command("xorriso", args...).CombinedOutput(); err != nil {
		t.Fatalf("xorriso (apt-get install xorriso): %v\n%s", err, out)
	}

	return iso
}

// talos.platform=openstack with a config drive (ISO 9660 labelled config-2 on an IDE CD-ROM):
// meta_data.json names the host, the instance, its zone and type, network_data.json gives the
// card (by its MAC) a static address, routes and a resolver, and user_data is the machine
// config. No DHCP runs and no metadata service is asked.
func TestOpenStackFromConfigDrive(t *testing.T) {
	cli := testenv.CLI{Binary: filepath.Join(binDir, "talosctl"), Home: t.TempDir(), Timeout: 30 * time.Second}
	config, talosconfig := nocloudConfig(t, cli)
	iso := openstackConfigDrive(t, config)

	start := time.Now()
	m := bootWith(t, qemuOptions{args: []string{"-drive", "file=" + iso + ",media=cdrom,if=ide,readonly=on"}}, "talos.platform=openstack")

	cli.TalosConfig = talosconfig
	ep := fmt.Sprintf("127.0.0.1:%d", m.port)

	took := waitAPID(t, m, cli, ep, start)
	t.Logf("openstack from a config drive: apid answered with the user data's certificates %s after QEMU started (KVM %v)", took.Round(100*time.Millisecond), kvm)

	assertNocloudNode(t, cli, ep, "openstack-1", `(?m)10\.0\.97\.0/24\s+10\.0\.2\.2\s+eth0\s+1024`, map[string]string{
		"platform": "openstack", "hostname": "openstack-1", "instanceId": "3f9e8d7c-6b5a-4e3d-9c2b-1a0f9e8d7c6b", "instanceType": "m1.tcg",
		"zone": "nova-az1", "providerId": "openstack:///3f9e8d7c-6b5a-4e3d-9c2b-1a0f9e8d7c6b",
	})

	console := m.consoleText()
	for _, want := range []string{
		"openstack: read meta_data.json, network_data.json, user_data from the config drive /dev/sr0",
		"talos.platform=openstack: the machine config is the platform's user data", "eth0: 10.0.2.15/24",
	} {
		if !strings.Contains(console, want) {
			t.Errorf("the console has no %q", want)
		}
	}

	if strings.Contains(console, "DHCP on eth0") || strings.Contains(console, "metadata service") {
		t.Errorf("DHCP ran or the metadata service was asked, with a config drive that gives it all")
	}
}

// talos.platform=openstack without a config drive: the node brings its network up by DHCP and
// asks the metadata service at 169.254.169.254 for meta_data.json (without instance_type: the
// EC2-style instance-type is asked for, as upstream), network_data.json, user_data and the
// EC2-style public-ipv4 (the floating IP, published as the node's external address). The
// test's server at that address, on the loopback of the test's own network namespace (QEMU's
// user network makes the guest's connections from it), stands in for Nova's metadata service;
// nothing leaves the namespace.
func TestOpenStackFromMetadataService(t *testing.T) {
	cli := testenv.CLI{Binary: filepath.Join(binDir, "talosctl"), Home: t.TempDir(), Timeout: 30 * time.Second}
	config, talosconfig := nocloudConfig(t, cli)

	docs := map[string]string{
		"/openstack/latest/meta_data.json":    `{"uuid": "8c7b6a59-4e3d-4c2b-a19f-8e7d6c5b4a39", "hostname": "openstack-md-1", "availability_zone": "nova", "project_id": "1a2b3c4d", "launch_index": 0, "devices": [], "public_keys": {}}`,
		"/openstack/latest/network_data.json": openstackNetworkData("10.0.96.0"),
		"/openstack/latest/user_data":         string(config),
		"/latest/meta-data/instance-type":     "m1.small",
		"/latest/meta-data/public-ipv4":       "198.51.100.77", // the floating IP
	}

	var (
		mu     sync.Mutex
		served []string
	)

	// The guest asks after its DHCP lease, and again while the server is not there yet; bootWith
	// first, as it skips where the test has no network namespace of its own.
	start := time.Now()
	m := bootWith(t, qemuOptions{open: true}, "talos.platform=openstack")

	serveAtMetadataAddress(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		served = append(served, r.URL.Path)
		mu.Unlock()

		body, ok := docs[r.URL.Path]
		if !ok {
			http.NotFound(w, r)

			return
		}

		w.Write([]byte(body))
	}))

	cli.TalosConfig = talosconfig
	ep := fmt.Sprintf("127.0.0.1:%d", m.port)

	took := waitAPID(t, m, cli, ep, start)
	t.Logf("openstack from the metadata service: apid answered %s after QEMU started (KVM %v)", took.Round(100*time.Millisecond), kvm)

	assertNocloudNode(t, cli, ep, "openstack-md-1", `(?m)10\.0\.96\.0/24\s+10\.0\.2\.2\s+eth0\s+1024`, map[string]string{
		"platform": "openstack", "hostname": "openstack-md-1", "instanceId": "8c7b6a59-4e3d-4c2b-a19f-8e7d6c5b4a39", "instanceType": "m1.small",
		"zone": "nova", "providerId": "openstack:///8c7b6a59-4e3d-4c2b-a19f-8e7d6c5b4a39",
	})

	// The floating IP is the node's external address.
	assertExternalAddress(t, guestGet(t, cli, ep), "198.51.100.77")

	mu.Lock()
	defer mu.Unlock()

	for path := range docs {
		if !strings.Contains(strings.Join(served, " "), path) {
			t.Errorf("the node did not ask for %s (asked for %v)", path, served)
		}
	}

	if console := m.consoleText(); !strings.Contains(console, "openstack: no config drive (a volume labelled config-2): asking the metadata service") ||
		!strings.Contains(console, "openstack: read meta_data.json, network_data.json, user_data from the metadata service http://169.254.169.254/") {
		t.Errorf("the console does not say where the documents were read")
	}
}
