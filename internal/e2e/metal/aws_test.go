package metal

import (
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talos-go/talos/internal/platform"
	"github.com/talos-go/talos/internal/platform/aws"
	"github.com/talos-go/talos/internal/testenv"
)

// linkLocalMetadata is the address the clouds' metadata services answer at.
const linkLocalMetadata = "169.254.169.254"

// serveAtMetadataAddress serves h at http://169.254.169.254/ (serveAt), where the clouds'
// metadata services answer: it stands in for the cloud's service.
func serveAtMetadataAddress(t *testing.T, h http.Handler) {
	t.Helper()
	serveAt(t, linkLocalMetadata, h)
}

// talos.platform=aws, booted from AWS's disk image (make boot BOOT_PLATFORMS=all): the node brings
// its network up by DHCP and asks the instance metadata service (the test's stand-in at
// 169.254.169.254, IMDSv2: a token PUT first, the token on every GET) for its user data (the
// machine config), its hostname, identity and placement, and its card (by the guest's MAC).
func TestAWSFromIMDS(t *testing.T) {
	cli := testenv.CLI{Binary: filepath.Join(binDir, "talosctl"), Home: t.TempDir(), Timeout: 30 * time.Second}
	config, talosconfig := nocloudConfig(t, cli)

	const (
		token = "AQAEAN9kZS1lMmUtdG9rZW4="
		mac   = "52:54:00:12:34:56" // QEMU's first card
	)

	docs := map[string]string{
		"/latest/user-data":                                                   string(config),
		"/latest/meta-data/hostname":                                          "ip-10-0-2-15.eu-central-1.compute.internal",
		"/latest/meta-data/instance-id":                                       "i-0e2e7a1b2c3d4e5f6",
		"/latest/meta-data/instance-type":                                     "c7i.large",
		"/latest/meta-data/instance-life-cycle":                               "spot",
		"/latest/meta-data/local-hostname":                                    "ip-10-0-2-15.eu-central-1.compute.internal",
		"/latest/meta-data/local-ipv4":                                        "10.0.2.15",
		"/latest/meta-data/public-ipv4":                                       "203.0.113.41",
		"/latest/meta-data/placement/region":                                  "eu-central-1",
		"/latest/meta-data/placement/availability-zone":                       "eu-central-1c",
		"/latest/meta-data/network/interfaces/macs/":                          mac + "/",
		"/latest/meta-data/network/interfaces/macs/" + mac + "/device-number": "0",
		"/latest/meta-data/network/interfaces/macs/" + mac + "/local-ipv4s":   "10.0.2.15",
	}

	var (
		mu                sync.Mutex
		served, tokenless []string
		tokens            int
	)

	serveAtMetadataAddress(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()

		if r.URL.Path == "/latest/api/token" {
			if r.Method != http.MethodPut || r.Header.Get(aws.TokenTTLHeader) == "" {
				http.Error(w, "", http.StatusBadRequest)

				return
			}

			tokens++
			w.Write([]byte(token))

			return
		}

		if r.Header.Get(aws.TokenHeader) != token {
			tokenless = append(tokenless, r.URL.Path)
			http.Error(w, "", http.StatusUnauthorized)

			return
		}

		served = append(served, r.URL.Path)

		body, ok := docs[r.URL.Path]
		if !ok {
			http.NotFound(w, r)

			return
		}

		w.Write([]byte(body))
	}))

	start := time.Now()
	m := bootWith(t, qemuOptions{open: true, disk: platformImage(t, platform.AWS)})

	cli.TalosConfig = talosconfig
	ep := fmt.Sprintf("127.0.0.1:%d", m.port)

	took := waitAPID(t, m, cli, ep, start)
	t.Logf("aws from the test's IMDS stand-in: apid answered %s after QEMU started (KVM %v)", took.Round(100*time.Millisecond), kvm)

	get := guestGet(t, cli, ep)

	assertPlatformMetadata(t, get, map[string]string{
		"platform": "aws", "hostname": "ip-10-0-2-15.eu-central-1.compute.internal", "region": "eu-central-1", "zone": "eu-central-1c",
		"instanceType": "c7i.large", "instanceId": "i-0e2e7a1b2c3d4e5f6", "providerId": "aws:///eu-central-1c/i-0e2e7a1b2c3d4e5f6", "spot": "true",
		"internalDNS": "ip-10-0-2-15.eu-central-1.compute.internal",
	})

	var out string

	if out = get("hostnamestatus", "-o", "yaml"); !regexp.MustCompile(`(?m)^\s+hostname: ip-10-0-2-15$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^\s+domainname: eu-central-1\.compute\.internal$`).MatchString(out) {
		t.Errorf("hostnamestatus: not ip-10-0-2-15 in eu-central-1.compute.internal:\n%s", out)
	}

	// The address is DHCP's (QEMU's user network gives 10.0.2.15), on the card IMDS named by MAC.
	if out = get("addresses"); !regexp.MustCompile(`(?m)eth0/10\.0\.2\.15/24\s`).MatchString(out) {
		t.Errorf("get addresses: no eth0/10.0.2.15/24:\n%s", out)
	}

	// The public IPv4 address (the VPC's NAT of the card's) is the node's external address.
	assertExternalAddress(t, get, "203.0.113.41")

	if out = get("machinetype"); !strings.Contains(out, "controlplane") {
		t.Errorf("the user data is not the machine config: machinetype\n%s", out)
	}

	mu.Lock()
	defer mu.Unlock()

	if tokens == 0 || len(tokenless) > 0 {
		t.Errorf("%d tokens taken; asked without the token: %v", tokens, tokenless)
	}

	for _, path := range []string{"/latest/user-data", "/latest/meta-data/instance-id", "/latest/meta-data/placement/availability-zone", "/latest/meta-data/network/interfaces/macs/" + mac + "/local-ipv4s", "/latest/meta-data/public-ipv4"} {
		if !strings.Contains(strings.Join(served, " "), path) {
			t.Errorf("the node did not fetch %s (served %v)", path, served)
		}
	}

	if console := m.consoleText(); !strings.Contains(console, "aws: instance i-0e2e7a1b2c3d4e5f6 (c7i.large) in eu-central-1c") {
		t.Errorf("the console does not name the instance")
	}
}
