package metal

import (
	"encoding/base64"
	"fmt"
	"io"
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

// talos.platform=azure, booted from Azure's VHD: the custom data (the machine config) in ovf-
// env.xml on a UDF disc in an IDE CD-ROM drive, as Azure attaches its provisioning disc; the
// network by DHCP; the hostname and the metadata from IMDS, and the Ready report to the wire
// server. The test's servers at 169.254.169.254 and 168.63.129.16 stand in for Azure's IMDS and
// wire server, answering as they are documented to; they are in the test's own network namespace.
func TestAzure(t *testing.T) {
	cli := testenv.CLI{Binary: filepath.Join(binDir, "talosctl"), Home: t.TempDir(), Timeout: 30 * time.Second}
	config, talosconfig := nocloudConfig(t, cli)

	dir := t.TempDir()
	ovf := `<?xml version="1.0" encoding="utf-8"?>
<ns0:Environment xmlns:ns0="http://schemas.dmtf.org/ovf/environment/1" xmlns:ns1="http://schemas.microsoft.com/windowsazure">
  <ns1:ProvisioningSection>
    <ns1:Version>1.0</ns1:Version>
    <ns1:LinuxProvisioningConfigurationSet>
      <ns1:ConfigurationSetType>LinuxProvisioningConfiguration</ns1:ConfigurationSetType>
      <ns1:HostName>azure-1</ns1:HostName>
      <ns1:UserName>talos</ns1:UserName>
      <ns1:CustomData>` + base64.StdEncoding.EncodeToString(config) + `</ns1:CustomData>
    </ns1:LinuxProvisioningConfigurationSet>
  </ns1:ProvisioningSection>
</ns0:Environment>
`
	if err := os.WriteFile(filepath.Join(dir, "ovf-env.xml"), []byte(ovf), 0o600); err != nil {
		t.Fatal(err)
	}

	disc := filepath.Join(dir, "provisioning.iso")
	if out, err := exec.Command("genisoimage", "-quiet", "-udf", "-V", "rd_rdfe_stable", "-o", disc, "-graft-points", "ovf-env.xml="+filepath.Join(dir, "ovf-env.xml")).CombinedOutput(); err != nil {
		t.Fatalf("genisoimage (apt-get install genisoimage): %v\n%s", err, out)
	}

	const resourceID = "/subscriptions/6a1b2c3d-0000-4e5f-8a9b-0c1d2e3f4a5b/resourceGroups/Talos-E2E/providers/Microsoft.Compute/virtualMachines/azure-1"

	imds := map[string]string{
		"/metadata/instance/compute": `{"location": "westeurope", "name": "azure-1", "osProfile": {"computerName": "azure-1"}, "platformFaultDomain": "0",
			"resourceId": "` + resourceID + `", "vmId": "0f3c8a4e-5b6d-4c7e-9f80-a1b2c3d4e5f6", "vmSize": "Standard_D2s_v5", "zone": "3", "evictionPolicy": "Delete", "priority": "Spot"}`,
		"/metadata/instance/network/interface": `[{"ipv4": {"ipAddress": [{"privateIpAddress": "10.0.2.15", "publicIpAddress": "20.61.15.7"}], "subnet": [{"address": "10.0.2.0", "prefix": "24"}]}, "ipv6": {"ipAddress": []}, "macAddress": "525400123456"}]`,
	}

	var (
		mu              sync.Mutex
		asked, reports  []string
		wrongIMDSHeader bool
	)

	serveAt(t, "169.254.169.254", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()

		asked = append(asked, r.URL.String())

		if r.Header.Get("Metadata") != "true" {
			wrongIMDSHeader = true

			http.Error(w, `{"error": "Bad request. Required metadata header not specified"}`, http.StatusBadRequest)

			return
		}

		body, ok := imds[r.URL.Path]
		if !ok {
			http.NotFound(w, r)

			return
		}

		w.Write([]byte(body))
	}))

	serveAt(t, "168.63.129.16", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Ms-Version") != "2015-04-05" {
			http.Error(w, "no x-ms-version", http.StatusBadRequest)

			return
		}

		switch r.URL.Query().Get("comp") {
		case "goalstate":
			w.Write([]byte(`<?xml version="1.0" encoding="utf-8"?><GoalState><Version>2015-04-05</Version><Incarnation>1</Incarnation>` +
				`<Container><ContainerId>c-e2e</ContainerId><RoleInstanceList><RoleInstance><InstanceId>i-e2e</InstanceId><State>Started</State>` +
				`</RoleInstance></RoleInstanceList></Container></GoalState>`))
		case "health":
			b, _ := io.ReadAll(r.Body)

			mu.Lock()
			reports = append(reports, string(b))
			mu.Unlock()
		default:
			http.NotFound(w, r)
		}
	}))

	start := time.Now()
	m := bootWith(t, qemuOptions{open: true, disk: platformImage(t, platform.Azure), args: []string{"-drive", "file=" + disc + ",media=cdrom,if=ide,readonly=on"}})

	cli.TalosConfig = talosconfig
	ep := fmt.Sprintf("127.0.0.1:%d", m.port)

	took := waitAPID(t, m, cli, ep, start)
	t.Logf("azure: apid answered with the custom data's certificates %s after QEMU started (KVM %v)", took.Round(100*time.Millisecond), kvm)

	get := guestGet(t, cli, ep)

	assertPlatformMetadata(t, get, map[string]string{
		"platform": "azure", "hostname": "azure-1", "region": "westeurope", "zone": "westeurope-3", "instanceType": "Standard_D2s_v5",
		"instanceId": resourceID, "providerId": "azure://" + strings.Replace(resourceID, "Talos-E2E", "talos-e2e", 1), "spot": "true",
	})

	var out string

	if out = get("hostnamestatus", "-o", "yaml"); !regexp.MustCompile(`(?m)^\s+hostname: azure-1$`).MatchString(out) {
		t.Errorf("hostnamestatus: not azure-1:\n%s", out)
	}

	if out = get("addresses"); !regexp.MustCompile(`(?m)eth0/10\.0\.2\.15/24\s`).MatchString(out) {
		t.Errorf("get addresses: no eth0/10.0.2.15/24 (DHCP):\n%s", out)
	}

	// Upstream's MTU for eth0: Azure's encapsulation leaves 1400 bytes.
	if out = get("links", "eth0", "-o", "yaml"); !regexp.MustCompile(`(?m)^\s+mtu: 1400$`).MatchString(out) {
		t.Errorf("eth0's MTU is not 1400:\n%s", out)
	}

	if out = get("machinetype"); !strings.Contains(out, "controlplane") {
		t.Errorf("the custom data is not the machine config: machinetype\n%s", out)
	}

	mu.Lock()
	defer mu.Unlock()

	want := `<Health xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" xmlns:xsd="http://www.w3.org/2001/XMLSchema"><GoalStateIncarnation>1</GoalStateIncarnation>` +
		`<Container><ContainerId>c-e2e</ContainerId><RoleInstanceList><Role><InstanceId>i-e2e</InstanceId><Health><State>Ready</State></Health></Role></RoleInstanceList></Container></Health>`
	if len(reports) != 1 || !strings.Contains(reports[0], want) {
		t.Errorf("the wire server got health reports %q, want one Ready report", reports)
	}

	if wrongIMDSHeader || len(asked) < 2 {
		t.Errorf("IMDS was asked %v (a request without Metadata: true: %v)", asked, wrongIMDSHeader)
	}

	console := m.consoleText()
	for _, w := range []string{
		"azure: read the custom data from ovf-env.xml of the disc /dev/sr0 (udf)", "reported Ready to the wire server http://168.63.129.16",
		"azure: public addresses [20.61.15.7]", "talos.platform=azure: the machine config is the platform's user data",
	} {
		if !strings.Contains(console, w) {
			t.Errorf("the console has no %q", w)
		}
	}
}
