package azure

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"

	"github.com/talos-go/talos/internal/platform"
)

func read(t *testing.T, name string) []byte {
	t.Helper()

	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}

	return b
}

func ip(s string) netip.Addr { return netip.MustParseAddr(s) }

const (
	subscription = "/subscriptions/6a1b2c3d-0000-4e5f-8a9b-0c1d2e3f4a5b/resourceGroups/"
	cpConfig     = "version: v1alpha1\nmachine:\n  type: controlplane\n"
)

// Every field read of a compute document, in a zoned region on a Spot VM and in a regional one.
func TestMetadata(t *testing.T) {
	for _, tt := range []struct {
		file string
		want runtime.PlatformMetadataSpec
	}{
		{"compute-zoned-spot.json", runtime.PlatformMetadataSpec{
			Platform: "azure", Hostname: "cp-1.talos.internal", Region: "westeurope", Zone: "westeurope-2", InstanceType: "Standard_D2s_v5",
			InstanceID: subscription + "Talos-Cluster-RG/providers/Microsoft.Compute/virtualMachines/talos-cp-1",
			ProviderID: "azure://" + subscription + "talos-cluster-rg/providers/Microsoft.Compute/virtualMachines/talos-cp-1", Spot: true,
		}},
		{"compute-regional.json", runtime.PlatformMetadataSpec{
			Platform: "azure", Hostname: "worker-7", Region: "northeurope", Zone: "1", InstanceType: "Standard_B2s",
			InstanceID: subscription + "workers/providers/Microsoft.Compute/virtualMachines/worker-7",
			ProviderID: "azure://" + subscription + "workers/providers/Microsoft.Compute/virtualMachines/worker-7",
		}},
	} {
		c, err := ParseCompute(read(t, tt.file))
		if err != nil {
			t.Fatal(err)
		}

		got, err := Metadata(c)
		if err != nil {
			t.Fatal(err)
		}

		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s:\ngot  %+v\nwant %+v", tt.file, got, tt.want)
		}
	}
}

// DHCPv4 and MTU 1400 on eth0; DHCPv6 and Azure's IPv6 gateway on each card with an IPv6
// address (the first and the third); the public addresses of all.
func TestNetwork(t *testing.T) {
	c, err := ParseCompute(read(t, "compute-zoned-spot.json"))
	if err != nil {
		t.Fatal(err)
	}

	ifaces, err := ParseInterfaces(read(t, "interfaces.json"))
	if err != nil {
		t.Fatal(err)
	}

	n, public := Network(c, ifaces)

	gw := []platform.Route{{Via: ip("fe80::1234:5678:9abc"), Metric: 4096}}
	want := &platform.Network{Hostname: "cp-1.talos.internal", Links: []platform.Link{
		{Name: "eth0", MTU: 1400, DHCP4: true, DHCP6: true, Routes: gw},
		{Name: "eth2", DHCP6: true, Routes: gw},
	}}

	if !reflect.DeepEqual(n, want) {
		t.Errorf("network\ngot  %+v\nwant %+v", n, want)
	}

	if want := []netip.Addr{ip("20.61.15.7"), ip("2603:1020:203::17")}; !reflect.DeepEqual(public, want) {
		t.Errorf("public addresses %v, want %v", public, want)
	}

	if host, _ := n.HostnameParts(); host != "cp-1" {
		t.Errorf("host %q", host)
	}

	// An IPv4-only VM: eth0 alone, DHCPv4.
	n, public = Network(Compute{}, []Interface{{}})
	if len(n.Links) != 1 || n.Links[0].DHCP6 || len(public) != 0 {
		t.Errorf("IPv4 only: %+v, %v", n, public)
	}
}

func TestParseLoadBalancer(t *testing.T) {
	got, err := ParseLoadBalancer(read(t, "loadbalancer.json"))
	if err != nil {
		t.Fatal(err)
	}

	if want := []netip.Addr{ip("51.124.10.20"), ip("2603:1020:203::80")}; !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// Malformed documents are refused, naming the field.
func TestRefuses(t *testing.T) {
	for _, tt := range []struct {
		name string
		err  func() error
		want string
	}{
		{"compute", func() error { _, err := ParseCompute([]byte(`["a"]`)); return err }, "not the compute JSON object"},
		{"compute field", func() error { _, err := ParseCompute([]byte(`{"vmSize": 2}`)); return err }, "Compute.vmSize of type string"},
		{"resource ID", func() error { _, err := Metadata(Compute{ResourceID: "vm-1"}); return err }, `resourceId "vm-1" is not an Azure resource ID`},
		{"interfaces", func() error { _, err := ParseInterfaces([]byte(`{}`)); return err }, "not the JSON list of network interfaces"},
		{"interface address", func() error {
			_, err := ParseInterfaces([]byte(`[{}, {"ipv6": {"ipAddress": [{"privateIpAddress": "fd00::4", "publicIpAddress": "2603::1::2"}]}}]`))
			return err
		}, `[1].ipv6.ipAddress[0].publicIpAddress: "2603::1::2" is not an IP address`},
		{"load balancer", func() error {
			_, err := ParseLoadBalancer([]byte(`{"loadbalancer": {"publicIpAddresses": [{"frontendIpAddress": "lb.example"}]}}`))
			return err
		}, `loadbalancer.publicIpAddresses[0].frontendIpAddress: "lb.example" is not an IP address`},
		{"ovf-env", func() error { _, err := ParseOVFEnv([]byte("custom data")); return err }, "not an OVF Environment document"},
		{"custom data", func() error {
			_, err := ParseOVFEnv([]byte(`<Environment><ProvisioningSection><LinuxProvisioningConfigurationSet><CustomData>machine: {}</CustomData></LinuxProvisioningConfigurationSet></ProvisioningSection></Environment>`))
			return err
		}, "ProvisioningSection.LinuxProvisioningConfigurationSet.CustomData: not base64"},
		{"goal state", func() error { _, err := ParseGoalState([]byte("<Health/>")); return err }, "not a GoalState document"},
		{"goal state container", func() error {
			_, err := ParseGoalState([]byte("<GoalState><Incarnation>1</Incarnation><Container><RoleInstanceList><RoleInstance><InstanceId>i</InstanceId></RoleInstance></RoleInstanceList></Container></GoalState>"))
			return err
		}, "GoalState.Container.ContainerId: missing"},
	} {
		if err := tt.err(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want %q", tt.name, err, tt.want)
		}
	}
}

func TestParseOVFEnv(t *testing.T) {
	b, err := ParseOVFEnv(read(t, "ovf-env.xml"))
	if err != nil || string(b) != cpConfig {
		t.Errorf("got %q, %v", b, err)
	}

	// A VM given no custom data: none.
	if b, err = ParseOVFEnv([]byte(`<Environment xmlns="http://schemas.dmtf.org/ovf/environment/1"><ProvisioningSection/></Environment>`)); err != nil || b != nil {
		t.Errorf("no custom data: %q, %v", b, err)
	}
}

func TestHealthReport(t *testing.T) {
	gs, err := ParseGoalState(read(t, "goalstate.xml"))
	if err != nil {
		t.Fatal(err)
	}

	if want := (GoalState{Incarnation: "3", ContainerID: "4c9e1b2a-7d3f-4e8a-b5c6-0d1e2f3a4b5c", InstanceID: "0f3c8a4e-5b6d-4c7e-9f80-a1b2c3d4e5f6._talos-cp-1"}); gs != want {
		t.Errorf("goal state %+v, want %+v", gs, want)
	}

	b, err := HealthReport(gs)
	if err != nil {
		t.Fatal(err)
	}

	want := `<?xml version="1.0" encoding="UTF-8"?>` + "\n" +
		`<Health xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" xmlns:xsd="http://www.w3.org/2001/XMLSchema">` +
		`<GoalStateIncarnation>3</GoalStateIncarnation><Container><ContainerId>4c9e1b2a-7d3f-4e8a-b5c6-0d1e2f3a4b5c</ContainerId>` +
		`<RoleInstanceList><Role><InstanceId>0f3c8a4e-5b6d-4c7e-9f80-a1b2c3d4e5f6._talos-cp-1</InstanceId><Health><State>Ready</State></Health></Role>` +
		`</RoleInstanceList></Container></Health>`
	if string(b) != want {
		t.Errorf("report\n%s\nwant\n%s", b, want)
	}
}

// cloud is a test server standing in for IMDS and the wire server: it answers as they do, and
// records the health reports posted to it.
type cloud struct {
	goalState []byte
	docs      map[string][]byte // IMDS's, by path
	versions  []string          // the API versions IMDS knows; nil: APIVersion
	mu        sync.Mutex
	reports   [][]byte
	asked     []string // IMDS's requests, path?query
}

func (c *cloud) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case strings.HasPrefix(r.URL.Path, "/metadata/"):
		c.mu.Lock()
		c.asked = append(c.asked, r.URL.Path+"?"+r.URL.RawQuery)
		c.mu.Unlock()

		// IMDS refuses a request without the header (it keeps proxies' requests out), and one
		// for an API version it does not know, with 400.
		versions := c.versions
		if versions == nil {
			versions = []string{APIVersion}
		}

		if r.Header.Get("Metadata") != "true" || !slices.Contains(versions, r.URL.Query().Get("api-version")) || r.URL.Query().Get("format") != "json" {
			http.Error(w, `{"error": "Bad request. api-version is invalid or was not specified in the request."}`, http.StatusBadRequest)

			return
		}

		b, ok := c.docs[r.URL.Path]
		if !ok {
			http.NotFound(w, r)

			return
		}

		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.Write(b)
	case r.URL.Path == "/machine/":
		if r.Header.Get("X-Ms-Version") != "2015-04-05" || r.Header.Get("X-Ms-Agent-Name") != "WALinuxAgent" || r.Header.Get("Content-Type") != "text/xml;charset=utf-8" {
			http.Error(w, "wrong headers", http.StatusBadRequest)

			return
		}

		switch comp := r.URL.Query().Get("comp"); {
		case comp == "goalstate" && r.Method == http.MethodGet:
			w.Write(c.goalState)
		case comp == "health" && r.Method == http.MethodPost:
			b, _ := io.ReadAll(r.Body)

			c.mu.Lock()
			c.reports = append(c.reports, b)
			c.mu.Unlock()
		default:
			http.Error(w, "not a wire server request", http.StatusBadRequest)
		}
	default:
		http.NotFound(w, r)
	}
}

// do is Env.Do without its tries.
func do(ctx context.Context, r platform.Request) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, cmp.Or(r.Method, http.MethodGet), r.URL, bytes.NewReader(r.Body))
	if err != nil {
		return nil, err
	}

	req.Header = r.Header.Clone()

	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()

	b, err := io.ReadAll(resp.Body)

	switch {
	case resp.StatusCode == http.StatusNotFound:
		return nil, fmt.Errorf("%s: %s: %w", r.URL, resp.Status, platform.ErrNotFound)
	case resp.StatusCode == http.StatusBadRequest:
		return nil, fmt.Errorf("%s: %s: %w", r.URL, resp.Status, platform.ErrBadRequest)
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("%s: %s", r.URL, resp.Status)
	}

	return b, err
}

// Data reads the custom data from the disc, then, with the network up, reports Ready to the
// wire server and reads IMDS.
func TestData(t *testing.T) {
	c := &cloud{goalState: read(t, "goalstate.xml"), docs: map[string][]byte{
		"/metadata/instance/compute":           read(t, "compute-zoned-spot.json"),
		"/metadata/instance/network/interface": read(t, "interfaces.json"),
		"/metadata/loadbalancer":               read(t, "loadbalancer.json"),
	}}
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, OVFEnv), read(t, "ovf-env.xml"), 0o600); err != nil {
		t.Fatal(err)
	}

	var (
		logs             []string
		up, mounted      bool
		discDir, discDev = dir, "/dev/sr0"
	)

	env := platform.Env{
		Disc: func(file string) (string, string, func(), error) {
			if file != "ovf-env.xml" {
				t.Errorf("looked for %q on the disc", file)
			}

			if discDir == "" {
				return "", "", nil, platform.ErrNoVolume
			}

			mounted = true

			return discDir, discDev, func() { mounted = false }, nil
		},
		NetworkUp: func() error { up = true; return nil },
		Do: func(ctx context.Context, r platform.Request) ([]byte, error) {
			if !up {
				t.Errorf("%s asked before the network was up", r.URL)
			}

			return do(ctx, r)
		},
		Log: func(format string, args ...any) { logs = append(logs, fmt.Sprintf(format, args...)) },
	}

	p := Azure{IMDS: srv.URL, WireServer: srv.URL}

	d, err := p.Data(t.Context(), env)
	if err != nil {
		t.Fatal(err)
	}

	if string(d.Config) != cpConfig || mounted || d.Network.Hostname != "cp-1.talos.internal" || len(d.Network.Links) != 2 ||
		d.Metadata.Zone != "westeurope-2" || !d.Metadata.Spot || d.Metadata.ProviderID == "" {
		t.Errorf("got config %q, network %+v, metadata %+v (disc still mounted: %v)", d.Config, d.Network, d.Metadata, mounted)
	}

	// The cards' and the load balancer's public addresses are the node's external ones.
	if got := fmt.Sprint(d.Network.ExternalIPs); got != "[20.61.15.7 2603:1020:203::17 51.124.10.20 2603:1020:203::80]" {
		t.Errorf("external IPs %s", got)
	}

	want, _ := HealthReport(GoalState{Incarnation: "3", ContainerID: "4c9e1b2a-7d3f-4e8a-b5c6-0d1e2f3a4b5c", InstanceID: "0f3c8a4e-5b6d-4c7e-9f80-a1b2c3d4e5f6._talos-cp-1"})
	if len(c.reports) != 1 || !bytes.Equal(c.reports[0], want) {
		t.Errorf("health reports %q, want one: %q", c.reports, want)
	}

	l := strings.Join(logs, "\n")
	for _, w := range []string{
		"azure: read the custom data from ovf-env.xml of the disc /dev/sr0",
		"azure: reported Ready to the wire server " + srv.URL,
		"azure: public addresses [20.61.15.7 2603:1020:203::17 51.124.10.20 2603:1020:203::80]",
	} {
		if !strings.Contains(l, w) {
			t.Errorf("logs %q: no %q", logs, w)
		}
	}

	// No disc and no load balancer: no config (maintenance mode), the rest as before.
	discDir = ""
	delete(c.docs, "/metadata/loadbalancer")

	logs = nil
	if d, err = p.Data(t.Context(), env); err != nil || d.Config != nil || d.Metadata.InstanceType != "Standard_D2s_v5" || len(c.reports) != 2 {
		t.Errorf("no disc: %+v, %v, %d reports", d, err, len(c.reports))
	}

	if !strings.Contains(strings.Join(logs, "\n"), "azure: no disc with ovf-env.xml in a CD-ROM drive: no custom data, the node waits in maintenance mode") {
		t.Errorf("logs %q", logs)
	}

	// A malformed IMDS document stops the boot, naming its URL and field.
	c.docs["/metadata/instance/network/interface"] = []byte(`[{"ipv4": {"ipAddress": [{"privateIpAddress": "10.20.0.400"}]}}]`)
	if _, err = p.Data(t.Context(), env); err == nil || !strings.Contains(err.Error(),
		"azure: "+srv.URL+"/metadata/instance/network/interface?api-version=2021-12-13&format=json: [0].ipv4.ipAddress[0].privateIpAddress: \"10.20.0.400\" is not an IP address") {
		t.Errorf("error %v", err)
	}

	// A malformed ovf-env.xml names the disc.
	discDir = t.TempDir()
	if err = os.WriteFile(filepath.Join(discDir, OVFEnv), []byte("<Environment><ProvisioningSection><LinuxProvisioningConfigurationSet><CustomData>%%</CustomData></LinuxProvisioningConfigurationSet></ProvisioningSection></Environment>"), 0o600); err != nil {
		t.Fatal(err)
	}

	if _, err = p.Data(t.Context(), env); err == nil || !strings.Contains(err.Error(), "azure: ovf-env.xml of the disc /dev/sr0: ProvisioningSection.LinuxProvisioningConfigurationSet.CustomData: not base64") {
		t.Errorf("error %v", err)
	}
}

// A wire server that is not there is logged; the node boots on with IMDS's data.
func TestDataWithoutWireServer(t *testing.T) {
	c := &cloud{goalState: read(t, "goalstate.xml"), docs: map[string][]byte{
		"/metadata/instance/compute":           read(t, "compute-regional.json"),
		"/metadata/instance/network/interface": []byte("[]"),
	}}
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)

	var logs []string

	env := platform.Env{
		Disc:      func(string) (string, string, func(), error) { return "", "", nil, platform.ErrNoVolume },
		NetworkUp: func() error { return nil },
		Do:        do,
		Log:       func(format string, args ...any) { logs = append(logs, fmt.Sprintf(format, args...)) },
	}

	d, err := Azure{IMDS: srv.URL, WireServer: srv.URL + "/wire"}.Data(t.Context(), env)
	if err != nil || d.Metadata.Hostname != "worker-7" || d.Network.Links[0].Name != "eth0" || d.Network.Links[0].DHCP6 {
		t.Fatalf("got %+v, %v", d, err)
	}

	if l := strings.Join(logs, "\n"); !strings.Contains(l, "azure: reporting Ready to the wire server "+srv.URL+"/wire: fetching the goal state:") {
		t.Errorf("logs %q", logs)
	}
}

// An IMDS that answers 400 to APIVersion (Azure Stack Hub's) is asked everything at
// APIVersionFallback, as upstream.
func TestDataOlderAPIVersion(t *testing.T) {
	c := &cloud{goalState: read(t, "goalstate.xml"), versions: []string{APIVersionFallback}, docs: map[string][]byte{
		"/metadata/instance/compute":           read(t, "compute-regional.json"),
		"/metadata/instance/network/interface": read(t, "interfaces.json"),
	}}
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)

	var logs []string

	env := platform.Env{
		Disc:      func(string) (string, string, func(), error) { return "", "", nil, platform.ErrNoVolume },
		NetworkUp: func() error { return nil },
		Do:        do,
		Log:       func(format string, args ...any) { logs = append(logs, fmt.Sprintf(format, args...)) },
	}

	d, err := Azure{IMDS: srv.URL, WireServer: srv.URL}.Data(t.Context(), env)
	if err != nil || d.Metadata.Hostname != "worker-7" || len(d.Network.ExternalIPs) == 0 {
		t.Fatalf("got %+v, %v", d, err)
	}

	want := []string{
		"/metadata/instance/compute?api-version=" + APIVersion + "&format=json",
		"/metadata/instance/compute?api-version=" + APIVersionFallback + "&format=json",
		"/metadata/instance/network/interface?api-version=" + APIVersionFallback + "&format=json",
		"/metadata/loadbalancer?api-version=" + APIVersionFallback + "&format=json",
	}
	if !slices.Equal(c.asked, want) {
		t.Errorf("IMDS was asked\n%s\nwant\n%s", strings.Join(c.asked, "\n"), strings.Join(want, "\n"))
	}

	if l := strings.Join(logs, "\n"); !strings.Contains(l, "azure: IMDS refused API version "+APIVersion) || !strings.Contains(l, "asking with "+APIVersionFallback) {
		t.Errorf("logs %q", logs)
	}
}
