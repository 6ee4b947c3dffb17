package openstack

import (
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

// drive is a config drive's recorded tree (as Nova writes it, trimmed to openstack/latest).
const drive = "testdata/config-drive"

func read(t *testing.T, name string) []byte {
	t.Helper()

	b, err := os.ReadFile(filepath.Join(drive, name))
	if err != nil {
		t.Fatal(err)
	}

	return b
}

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }
func ip(s string) netip.Addr    { return netip.MustParseAddr(s) }

// A recorded network_data.json: an ovs link with static IPv4 and IPv6 (netmasks of both
// families, a default route given as 0.0.0.0/0.0.0.0, a gateway, routes), a phy link with
// DHCPv4 and a stateless DHCPv6 network that carries an address, a vif without a MAC (eth2) on
// SLAAC, and services: DNS servers (once each; ntp is not read).
func TestParseNetworkData(t *testing.T) {
	got, err := ParseNetworkData(read(t, NetworkData))
	if err != nil {
		t.Fatal(err)
	}

	want := &platform.Network{
		Links: []platform.Link{
			{MAC: "fa:16:3e:4a:7c:01", MTU: 1442, Addresses: []netip.Prefix{pfx("10.20.30.41/24"), pfx("2001:db8:20:30::41/64")},
				Routes: []platform.Route{
					{Via: ip("10.20.30.1")}, {To: pfx("172.16.5.0/24"), Via: ip("10.20.30.254"), Metric: 1024},
					{Via: ip("2001:db8:20:30::1")}, {To: pfx("2001:db8:99::/48"), Via: ip("2001:db8:20:30::fe"), Metric: 1024},
				}},
			{MAC: "fa:16:3e:4a:7c:02", DHCP4: true, DHCP6: true, Addresses: []netip.Prefix{pfx("fd00:5::f816:3eff:fe4a:7c02/64")}},
			{Name: "eth2"},
		},
		Resolvers: []netip.Addr{ip("10.20.30.2"), ip("2001:db8:20:30::2")},
	}

	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}

	// An address without a netmask is the address alone, as upstream's.
	if n, err := ParseNetworkData([]byte(`{"links":[{"id":"l","type":"phy"}],"networks":[{"link":"l","type":"ipv4","ip_address":"192.0.2.7"}]}`)); err != nil || n.Links[0].Addresses[0] != pfx("192.0.2.7/32") {
		t.Errorf("no netmask: %+v, %v", n, err)
	}
}

// A network_data.json with a bond of two phy links (802.3ad, miimon, hash policy), a VLAN on it
// listed before it with a static address, and a VLAN on a card found by its MAC: the cards
// first, then bond0 over them by MAC, then the VLANs named as upstream's.
func TestParseNetworkDataBondVLAN(t *testing.T) {
	b, err := os.ReadFile("testdata/bond-vlan/network_data.json")
	if err != nil {
		t.Fatal(err)
	}

	got, err := ParseNetworkData(b)
	if err != nil {
		t.Fatal(err)
	}

	want := &platform.Network{
		Links: []platform.Link{
			{MAC: "fa:16:3e:77:00:01", MTU: 9000},
			{MAC: "fa:16:3e:77:00:02", MTU: 9000},
			{Name: "bond0", Kind: "bond", MTU: 9000, DHCP4: true, HardwareAddr: "fa:16:3e:77:00:01", Bond: &platform.Bond{
				Members: []string{"fa:16:3e:77:00:01", "fa:16:3e:77:00:02"}, Mode: "802.3ad", MIIMon: 100, HashPolicy: "layer3+4"}},
			{Name: "bond0.101", Kind: "vlan", MTU: 1400, VLAN: &platform.VLAN{Parent: "bond0", ID: 101},
				Addresses: []netip.Prefix{pfx("10.101.0.5/24")}, Routes: []platform.Route{{Via: ip("10.101.0.1")}}},
			{Name: "vlan7", Kind: "vlan", VLAN: &platform.VLAN{Parent: "fa:16:3e:77:00:02", ID: 7}},
		},
	}

	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

// What is not read is refused by its field, with what to do instead.
func TestParseNetworkDataRefuses(t *testing.T) {
	const phy = `{"id":"l0","type":"phy","ethernet_mac_address":"fa:16:3e:00:00:01"}`

	for _, tt := range []struct{ doc, want string }{
		{`[]`, "not a list"},
		{`{"links": {}}`, `links: not a list`},
		{`{"links": [`, "not JSON"},
		{`{"links": [null]}`, "links[0]: null: give an object"},
		{`{"links": [{"id":"b","type":"bond","bond_links":["x","y"]}]}`, `links[0].bond_links[0]: "x" is not the id of a card or bond in links`},
		{`{"links": [{"id":"b","type":"bond"}]}`, "links[0].bond_links: a bond needs its member links"},
		{`{"links": [` + phy + `,{"id":"b","type":"bond","bond_links":["l0"],"bond_mode":"fastest"}]}`, `links[1].bond_mode: "fastest"`},
		{`{"links": [` + phy + `,{"id":"b","type":"bond","bond_links":["l0"],"bond_xmit_hash_policy":"layer9"}]}`, `links[1].bond_xmit_hash_policy: "layer9"`},
		{`{"links": [` + phy + `,{"id":"b","type":"bond","bond_links":["l0"],"bond_miimon":"100"}]}`, "links[1].bond_miimon: a JSON string, not a uint32"},
		{`{"links": [` + phy + `,{"id":"v","type":"vlan","vlan_link":"l0","vlan_id":0}]}`, "links[1].vlan_id: 0 is not a VLAN ID: give 1 to 4094"},
		{`{"links": [` + phy + `,{"id":"v","type":"vlan","vlan_id":10}]}`, "links[1].vlan_link: a VLAN needs its parent link"},
		{`{"links": [` + phy + `,{"id":"v","type":"vlan","vlan_link":"v2","vlan_id":10},{"id":"v2","type":"vlan","vlan_link":"l0","vlan_id":11}]}`, `links[1].vlan_link: "v2" is not the id of a card or bond in links`},
		{`{"links": [{"id":"x","type":"hyperv"}]}`, `links[0].type: "hyperv" is not a link type read here (phy, vif, ovs`},
		{`{"links": [{"id":"x","type":"phy","mtu":"1500"}]}`, "links[0].mtu: a JSON string, not a int"},
		{`{"links": [{"id":"x","type":"phy","ethernet_mac_address":"fa:16:3e"}]}`, `links[0].ethernet_mac_address: "fa:16:3e" is not a MAC address`},
		{`{"links": [` + phy + `,` + phy + `]}`, `links[1].id: "l0" is the id of another link too`},
		{`{"links": [` + phy + `], "networks": [{"link":"l9","type":"ipv4_dhcp"}]}`, `networks[0].link: "l9" is not the id of a link in links`},
		{`{"links": [` + phy + `], "networks": [{"link":"l0","type":"ipv4_static"}]}`, `networks[0].type: "ipv4_static" is not a network type read here`},
		{`{"links": [` + phy + `], "networks": [{"link":"l0","type":"ipv4","ip_address":"10.0.0.300","netmask":"255.255.255.0"}]}`, `networks[0].ip_address: "10.0.0.300" is not an IP address`},
		{`{"links": [` + phy + `], "networks": [{"link":"l0","type":"ipv4","ip_address":"10.0.0.3","netmask":"255.0.255.0"}]}`, `networks[0].netmask: "255.0.255.0": its ones are not contiguous`},
		{`{"links": [` + phy + `], "networks": [{"link":"l0","type":"ipv4","ip_address":"10.0.0.3","netmask":"ffff::"}]}`, `networks[0].netmask: "ffff::" is not a netmask of 10.0.0.3`},
		{`{"links": [` + phy + `], "networks": [{"link":"l0","type":"ipv6","ip_address":"2001:db8::3/129"}]}`, `networks[0].ip_address: prefix length 129 is out of 0..128`},
		{`{"links": [` + phy + `], "networks": [{"link":"l0","type":"ipv4","ip_address":"10.0.0.3/24","gateway":"fe80::1"}]}`, `networks[0].gateway: fe80::1 is of the other IP family than 10.0.0.3`},
		{`{"links": [` + phy + `], "networks": [{"link":"l0","type":"ipv4","routes":[{"network":"10.9.0.0","netmask":"255.255.0.0","gateway":"gw"}]}]}`, `networks[0].routes[0].gateway: "gw" is not an IP address`},
		{`{"links": [` + phy + `], "networks": [{"link":"l0","type":"ipv4","routes":[{"netmask":"0.0.0.0","gateway":"10.0.0.1"}]}]}`, `networks[0].routes[0].network: "" is not an IP address`},
		{`{"links": [` + phy + `], "networks": [{"link":"l0","type":"ipv4","routes":"none"}]}`, "networks[0].routes: a JSON string, not a"},
		{`{"services": [{"type":"dns","address":"dns.example.org"}]}`, `services[0].address: "dns.example.org" is not an IP address`},
	} {
		_, err := ParseNetworkData([]byte(tt.doc))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want %q", tt.doc, err, tt.want)
		}
	}
}

func TestParseMetaData(t *testing.T) {
	m, err := ParseMetaData(read(t, MetaData))
	if err != nil {
		t.Fatal(err)
	}

	if want := (Meta{UUID: "5d2c9a1e-7b40-4f6e-9c3a-2e8f01b7d4a6", Hostname: "worker-3.cloud.example.org", AvailabilityZone: "az-east-2"}); m != want {
		t.Errorf("got %+v, want %+v", m, want)
	}

	if m, err = ParseMetaData([]byte(`{"uuid": "u", "hostname": null, "instance_type": "m1.small"}`)); err != nil || m != (Meta{UUID: "u", InstanceType: "m1.small"}) {
		t.Errorf("null and instance_type: %+v, %v", m, err)
	}

	if m, err = ParseMetaData(nil); err != nil || m != (Meta{}) {
		t.Errorf("none: %+v, %v", m, err)
	}

	for doc, want := range map[string]string{
		`["uuid"]`:              "not a JSON object of keys",
		`{"uuid": 7}`:           `uuid: 7 is not a string: give it one ("uuid": "<value>")`,
		`{"hostname": ["a"]}`:   `hostname: ["a"] is not a string`,
		`{"availability_zone"`:  "not JSON",
		`{"instance_type": {}}`: "instance_type: {} is not a string",
	} {
		if _, err := ParseMetaData([]byte(doc)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want %q", doc, err, want)
		}
	}
}

func TestParse(t *testing.T) {
	docs := Documents{Source: "the config drive /dev/sr0", MetaData: read(t, MetaData), NetworkData: read(t, NetworkData), UserData: read(t, UserData)}

	d, err := Parse(docs)
	if err != nil {
		t.Fatal(err)
	}

	if string(d.Config) != string(docs.UserData) || d.Network.Hostname != "worker-3.cloud.example.org" || len(d.Network.Links) != 3 || len(d.Network.Resolvers) != 2 {
		t.Errorf("data %+v, network %+v", d, d.Network)
	}

	// As upstream: the hostname as given, the zone, the UUID as the instance and in the
	// provider ID.
	if want := (runtime.PlatformMetadataSpec{
		Platform: "openstack", Hostname: "worker-3.cloud.example.org", Zone: "az-east-2",
		InstanceID: "5d2c9a1e-7b40-4f6e-9c3a-2e8f01b7d4a6", ProviderID: "openstack:///5d2c9a1e-7b40-4f6e-9c3a-2e8f01b7d4a6",
	}); !reflect.DeepEqual(d.Metadata, want) {
		t.Errorf("metadata %+v, want %+v", d.Metadata, want)
	}

	// A #cloud-config is no machine config; no network_data.json is the boot's own network; the
	// metadata service's instance-type fills a missing instance_type.
	d, err = Parse(Documents{MetaData: []byte(`{"uuid":"u-1"}`), UserData: []byte("#cloud-config\nhostname: x\n"), InstanceType: "m1.large"})
	if err != nil || d.Config != nil || len(d.Network.Links) != 0 || d.Metadata.InstanceType != "m1.large" || d.Metadata.ProviderID != "openstack:///u-1" {
		t.Errorf("got %+v, %v", d, err)
	}

	// Errors name the document and its source.
	docs.NetworkData = []byte(`{"services":[{"type":"dns","address":"x"}]}`)
	if _, err = Parse(docs); err == nil || !strings.Contains(err.Error(), `openstack: openstack/latest/network_data.json of the config drive /dev/sr0: services[0].address: "x"`) {
		t.Errorf("error %v", err)
	}

	docs.MetaData = []byte(`{"hostname": 1}`)
	if _, err = Parse(docs); err == nil || !strings.Contains(err.Error(), "openstack: openstack/latest/meta_data.json of the config drive /dev/sr0: hostname: 1 is not a string") {
		t.Errorf("error %v", err)
	}
}

// env is a boot's Env over a config drive folder (none: "") and real HTTP.
func env(t *testing.T, dir string, logs *[]string, up *bool) platform.Env {
	t.Helper()

	return platform.Env{
		Cmdline: func(string) string { return "" },
		Volume: func(labels ...string) (string, string, func(), error) {
			if !reflect.DeepEqual(labels, []string{"config-2", "CONFIG-2"}) {
				t.Errorf("labels %v", labels)
			}

			if dir == "" {
				return "", "", nil, platform.ErrNoVolume
			}

			return dir, "/dev/sr0", func() {}, nil
		},
		NetworkUp: func() error { *up = true; return nil },
		Get: func(ctx context.Context, url string) ([]byte, error) {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				return nil, err
			}

			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return nil, err
			}
			defer resp.Body.Close()

			if resp.StatusCode == http.StatusNotFound {
				return nil, platform.ErrNotFound
			}

			if resp.StatusCode != http.StatusOK {
				return nil, fmt.Errorf("%s: %s", url, resp.Status)
			}

			return io.ReadAll(resp.Body)
		},
		Log: func(format string, args ...any) { *logs = append(*logs, fmt.Sprintf(format, args...)) },
	}
}

// A config drive with user_data is read and nothing else: the network is not brought up.
func TestDataConfigDrive(t *testing.T) {
	var (
		logs []string
		up   bool
	)

	d, err := OpenStack{Endpoint: "http://192.0.2.1/"}.Data(t.Context(), env(t, drive, &logs, &up))
	if err != nil {
		t.Fatal(err)
	}

	if up || string(d.Config) != "version: v1alpha1\nmachine:\n  type: worker\n" || d.Metadata.InstanceID != "5d2c9a1e-7b40-4f6e-9c3a-2e8f01b7d4a6" || len(d.Network.Links) != 3 {
		t.Errorf("network up %v, data %+v", up, d)
	}

	if l := strings.Join(logs, "\n"); !strings.Contains(l, "openstack: read meta_data.json, network_data.json, user_data from the config drive /dev/sr0") {
		t.Errorf("logs %q", logs)
	}
}

// The metadata service (a test server standing in for Nova's), when there is no config drive
// or it holds no user_data: the network comes up first, the three documents and the EC2-style
// instance-type are asked for; a document the service does not have is not there.
func TestDataMetadataService(t *testing.T) {
	docs := map[string]string{
		"/" + MetaData:     string(mustRead(t, "testdata/metadata-service-meta_data.json")),
		"/" + NetworkData:  `{"links":[{"id":"tap1","type":"ovs","ethernet_mac_address":"fa:16:3e:00:00:09","mtu":1450}],"networks":[{"id":"n0","link":"tap1","type":"ipv4_dhcp"}],"services":[]}`,
		"/" + UserData:     "version: v1alpha1\nmachine:\n  type: controlplane\n",
		"/" + InstanceType: "m1.medium\n",
		"/" + PublicIPv4:   "198.51.100.23\n",
	}

	var (
		mu     sync.Mutex
		served []string
	)

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		served = append(served, r.URL.Path)
		body, ok := docs[r.URL.Path]
		mu.Unlock()

		if !ok {
			http.NotFound(w, r)

			return
		}

		io.WriteString(w, body)
	}))
	defer srv.Close()

	p := OpenStack{Endpoint: srv.URL + "/"}

	for _, dir := range []string{"", t.TempDir()} { // no drive; a drive without user_data
		var (
			logs []string
			up   bool
		)

		served = nil

		d, err := p.Data(t.Context(), env(t, dir, &logs, &up))
		if err != nil {
			t.Fatal(err)
		}

		if !up || string(d.Config) != docs["/"+UserData] {
			t.Errorf("drive %q: network up %v, config %q", dir, up, d.Config)
		}

		if want := (runtime.PlatformMetadataSpec{
			Platform: "openstack", Hostname: "cp-1", Zone: "nova", InstanceType: "m1.medium",
			InstanceID: "e1f2a3b4-c5d6-4e7f-8a9b-0c1d2e3f4a5b", ProviderID: "openstack:///e1f2a3b4-c5d6-4e7f-8a9b-0c1d2e3f4a5b",
		}); !reflect.DeepEqual(d.Metadata, want) {
			t.Errorf("metadata %+v, want %+v", d.Metadata, want)
		}

		if want := []platform.Link{{MAC: "fa:16:3e:00:00:09", MTU: 1450, DHCP4: true}}; !reflect.DeepEqual(d.Network.Links, want) {
			t.Errorf("links %+v, want %+v", d.Network.Links, want)
		}

		if want := []netip.Addr{netip.MustParseAddr("198.51.100.23")}; !slices.Equal(d.Network.ExternalIPs, want) {
			t.Errorf("external IPs %v, want the floating IP %v", d.Network.ExternalIPs, want)
		}

		if want := []string{"/" + MetaData, "/" + NetworkData, "/" + UserData, "/" + InstanceType, "/" + PublicIPv4}; !slices.Equal(served, want) {
			t.Errorf("asked for %v, want %v", served, want)
		}

		l := strings.Join(logs, "\n")
		if !strings.Contains(l, "openstack: read meta_data.json, network_data.json, user_data from the metadata service "+srv.URL+"/") ||
			(dir == "" && !strings.Contains(l, "openstack: no config drive (a volume labelled config-2): asking the metadata service")) ||
			(dir != "" && !strings.Contains(l, "openstack: the config drive /dev/sr0 has no openstack/latest/user_data: asking the metadata service")) {
			t.Errorf("logs %q", logs)
		}
	}

	// A #cloud-config user data and no network_data.json: no config, the boot's own network;
	// meta_data.json names the instance type, so instance-type is not asked for.
	mu.Lock()
	docs["/"+UserData] = "#cloud-config\nusers: []\n"
	docs["/"+MetaData] = `{"uuid":"u-2","hostname":"h2","instance_type":"c1"}`
	delete(docs, "/"+NetworkData)
	delete(docs, "/"+PublicIPv4)
	served = nil
	mu.Unlock()

	var (
		logs []string
		up   bool
	)

	d, err := p.Data(t.Context(), env(t, "", &logs, &up))
	if err != nil || d.Config != nil || len(d.Network.Links) != 0 || d.Metadata.InstanceType != "c1" || slices.Contains(served, "/"+InstanceType) || d.Network.ExternalIPs != nil {
		t.Errorf("got %+v, %v; asked for %v", d, err, served)
	}

	if l := strings.Join(logs, "\n"); !strings.Contains(l, "openstack: the metadata service "+srv.URL+"/ has no openstack/latest/network_data.json") ||
		!strings.Contains(l, "is a #cloud-config, not a machine config: the node waits in maintenance mode") {
		t.Errorf("logs %q", logs)
	}

	// A malformed floating IP is refused, naming the document.
	mu.Lock()
	docs["/"+PublicIPv4] = "198.51.100"
	mu.Unlock()

	if _, err = p.Data(t.Context(), env(t, "", &logs, &up)); err == nil || !strings.Contains(err.Error(), `openstack: latest/meta-data/public-ipv4 of the metadata service `+srv.URL+`/: "198.51.100" is not an IP address`) {
		t.Errorf("error %v", err)
	}

	// A service that fails is an error naming the URL.
	mu.Lock()
	docs["/"+MetaData] = "{"
	mu.Unlock()

	if _, err = p.Data(t.Context(), env(t, "", &logs, &up)); err == nil || !strings.Contains(err.Error(), "openstack: openstack/latest/meta_data.json of the metadata service "+srv.URL+"/: not JSON") {
		t.Errorf("error %v", err)
	}

	srv.Close()

	if _, err = p.Data(t.Context(), env(t, "", &logs, &up)); err == nil || !strings.Contains(err.Error(), "openstack: fetching "+srv.URL+"/openstack/latest/meta_data.json") {
		t.Errorf("error %v", err)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()

	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}

	return b
}
