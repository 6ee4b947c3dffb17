package metal

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talos-go/talos/internal/platform"
	"github.com/talos-go/talos/internal/platform/gcp"
	"github.com/talos-go/talos/internal/testenv"
)

// talos.platform=gcp, booted from GCP's disk image (its tarball's disk.raw): the node brings its
// network up by DHCP and asks the metadata server (the test's stand-in at 169.254.169.254, which
// answers only requests with Metadata-Flavor: Google) for its user-data attribute (the machine
// config), its hostname, identity and zone, and its card (by the guest's MAC, with the VPC's MTU
// 1460).
func TestGCPFromMetadataServer(t *testing.T) {
	cli := testenv.CLI{Binary: filepath.Join(binDir, "talosctl"), Home: t.TempDir(), Timeout: 30 * time.Second}
	config, talosconfig := nocloudConfig(t, cli)

	ifaces, err := json.Marshal([]map[string]any{{
		"mac": "52:54:00:12:34:56", "mtu": 1460, "ip": "10.0.2.15", "gateway": "10.0.2.2", "subnetmask": "255.255.255.0",
		"network": "projects/551100223344/networks/default", "accessConfigs": []map[string]string{{"type": "ONE_TO_ONE_NAT", "externalIp": "34.118.7.40"}},
	}})
	if err != nil {
		t.Fatal(err)
	}

	const v1 = "/computeMetadata/v1/"

	docs := map[string]string{
		v1 + gcp.UserData:          string(config),
		v1 + gcp.ProjectID:         "e2e-project-5511",
		v1 + gcp.Name:              "gcp-node-1",
		v1 + gcp.Hostname:          "gcp-node-1.us-west1-b.c.e2e-project-5511.internal",
		v1 + gcp.ID:                "6630981277451093211",
		v1 + gcp.MachineType:       "projects/551100223344/machineTypes/n2d-standard-2",
		v1 + gcp.Zone:              "projects/551100223344/zones/us-west1-b",
		v1 + gcp.Preemptible:       "TRUE",
		v1 + gcp.Tags:              `["talos-e2e"]`,
		v1 + gcp.NetworkInterfaces: string(ifaces),
	}

	var (
		mu                 sync.Mutex
		served, flavorless []string
	)

	serveAtMetadataAddress(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()

		if r.Header.Get(gcp.FlavorHeader) != gcp.Flavor {
			flavorless = append(flavorless, r.URL.RequestURI())
			http.Error(w, "Missing Metadata-Flavor:Google header.", http.StatusForbidden)

			return
		}

		served = append(served, r.URL.RequestURI())

		body, ok := docs[r.URL.RequestURI()]
		if !ok {
			http.NotFound(w, r)

			return
		}

		w.Header().Set(gcp.FlavorHeader, gcp.Flavor)
		w.Write([]byte(body))
	}))

	start := time.Now()
	// GCP's machines boot UEFI: OVMF (Debian's ovmf) boots the image's GRUB from its ESP.
	m := bootWith(t, qemuOptions{open: true, disk: platformImage(t, platform.GCP), args: []string{"-bios", "/usr/share/ovmf/OVMF.fd"}})

	cli.TalosConfig = talosconfig
	ep := fmt.Sprintf("127.0.0.1:%d", m.port)

	took := waitAPID(t, m, cli, ep, start)
	t.Logf("gcp from the test's metadata server stand-in: apid answered %s after QEMU started (KVM %v)", took.Round(100*time.Millisecond), kvm)

	get := guestGet(t, cli, ep)

	if _, stderr, code := cli.Run(t, "-e", ep, "-n", "10.0.2.15", "ls", "/sys/firmware/efi"); code != 0 {
		t.Errorf("the node did not boot by UEFI (no /sys/firmware/efi): %s", stderr)
	}

	assertPlatformMetadata(t, get, map[string]string{
		"platform": "gcp", "hostname": "gcp-node-1.us-west1-b.c.e2e-project-5511.internal", "region": "us-west1", "zone": "us-west1-b",
		"instanceType": "n2d-standard-2", "instanceId": `"6630981277451093211"`, "providerId": "gce://e2e-project-5511/us-west1-b/gcp-node-1",
		"spot": "true", "talos-e2e": `""`,
	})

	var out string

	if out = get("hostnamestatus", "-o", "yaml"); !regexp.MustCompile(`(?m)^\s+hostname: gcp-node-1$`).MatchString(out) {
		t.Errorf("hostnamestatus: not gcp-node-1:\n%s", out)
	}

	if out = get("addresses"); !regexp.MustCompile(`(?m)eth0/10\.0\.2\.15/24\s`).MatchString(out) {
		t.Errorf("get addresses: no eth0/10.0.2.15/24:\n%s", out)
	}

	// The access config's one-to-one NAT address is the node's external address.
	assertExternalAddress(t, get, "34.118.7.40")

	if out = get("links", "eth0", "-o", "yaml"); !regexp.MustCompile(`(?m)^\s+mtu: 1460$`).MatchString(out) {
		t.Errorf("eth0 has not the MTU 1460 of the metadata server:\n%s", out)
	}

	// The resolver 169.254.169.254 the platform gives is not checked: QEMU's DHCP lease names
	// 10.0.2.3, and a lease's resolvers come before the platform's (as upstream's layers).

	if out = get("machinetype"); !strings.Contains(out, "controlplane") {
		t.Errorf("the user data is not the machine config: machinetype\n%s", out)
	}

	mu.Lock()
	defer mu.Unlock()

	if len(flavorless) > 0 {
		t.Errorf("asked without Metadata-Flavor: Google: %v", flavorless)
	}

	for path := range docs {
		if !strings.Contains(strings.Join(served, " "), path) {
			t.Errorf("the node did not fetch %s (served %v)", path, served)
		}
	}

	if console := m.consoleText(); !strings.Contains(console, "gcp: instance gcp-node-1 (n2d-standard-2) of project e2e-project-5511 in us-west1-b") {
		t.Errorf("the console does not name the instance")
	}
}
