package nocloud

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
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

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }
func ip(s string) netip.Addr    { return netip.MustParseAddr(s) }

// Recorded documents: Proxmox's v1 (static with a netmask, static6, DHCP, a name server
// entry), a v1 wrapped in network: with routes, a netplan v2 matched by MAC, and a bond with a
// VLAN on it in v1 and v2 (members given by MAC found by it).
func TestParseNetworkConfig(t *testing.T) {
	for _, tt := range []struct {
		file string
		want *platform.Network
	}{
		{"proxmox-v1.yaml", &platform.Network{
			Links: []platform.Link{
				{MAC: "bc:24:11:5e:0a:01", Addresses: []netip.Prefix{pfx("192.168.10.21/24"), pfx("2001:db8:10::21/64")},
					Routes: []platform.Route{{Via: ip("192.168.10.1")}, {Via: ip("2001:db8:10::1")}}},
				{MAC: "bc:24:11:5e:0a:02", DHCP4: true, DHCP6: true},
			},
			Resolvers: []netip.Addr{ip("192.168.10.1"), ip("2001:db8:10::1")},
		}},
		{"routes-v1.yaml", &platform.Network{
			Links: []platform.Link{{Name: "ens3", MTU: 9000, Addresses: []netip.Prefix{pfx("10.1.0.5/24")},
				Routes: []platform.Route{{To: pfx("172.16.0.0/12"), Via: ip("10.1.0.254"), Metric: 50}}}},
			Routes:    []platform.Route{{To: pfx("192.168.100.0/24"), Via: ip("10.1.0.253")}},
			Resolvers: []netip.Addr{ip("10.1.0.53"), ip("10.1.0.54")},
		}},
		{"bond-vlan-v1.yaml", &platform.Network{
			Links: []platform.Link{
				{MAC: "52:54:00:aa:00:01"},
				{MAC: "52:54:00:aa:00:02"},
				{Name: "bond0", Kind: "bond", DHCP4: true, Bond: &platform.Bond{
					Members: []string{"52:54:00:aa:00:01", "52:54:00:aa:00:02"}, Mode: "802.3ad", MIIMon: 100, HashPolicy: "layer3+4", LACPRate: "fast"}},
				{Name: "bond0.42", Kind: "vlan", MTU: 1400, VLAN: &platform.VLAN{Parent: "bond0", ID: 42},
					Addresses: []netip.Prefix{pfx("10.42.0.5/24")}, Routes: []platform.Route{{Via: ip("10.42.0.1")}}},
			},
		}},
		{"bond-vlan-v2.yaml", &platform.Network{
			Links: []platform.Link{
				{Name: "eth1"},
				{MAC: "52:54:00:bb:00:01"},
				{Name: "bond0", Kind: "bond", Bond: &platform.Bond{Members: []string{"52:54:00:bb:00:01", "eth1"}, Mode: "active-backup", MIIMon: 100}},
				{Name: "vlan10", Kind: "vlan", VLAN: &platform.VLAN{Parent: "bond0", ID: 10},
					Addresses: []netip.Prefix{pfx("192.168.10.5/24")}, Routes: []platform.Route{{Via: ip("192.168.10.1")}}},
			},
			Resolvers: []netip.Addr{ip("192.168.10.1")},
		}},
		{"netplan-v2.yaml", &platform.Network{
			Links: []platform.Link{
				{Name: "eth1", MTU: 1400, DHCP4: true, DHCP6: true}, // in the order of the IDs
				{MAC: "52:54:00:12:34:56", Addresses: []netip.Prefix{pfx("10.0.2.15/24"), pfx("2001:db8::15/64")},
					Routes: []platform.Route{{Via: ip("10.0.2.2")}, {Via: ip("2001:db8::1")}, {To: pfx("10.10.0.0/16"), Via: ip("10.0.2.3"), Metric: 100}, {Via: ip("10.0.2.4"), Metric: 2048}}},
			},
			Resolvers: []netip.Addr{ip("10.0.2.3"), ip("10.0.2.4")},
		}},
	} {
		t.Run(tt.file, func(t *testing.T) {
			got, err := ParseNetworkConfig(read(t, tt.file))
			if err != nil {
				t.Fatal(err)
			}

			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// What is not read is refused by its field, with what to do instead.
func TestParseNetworkConfigRefuses(t *testing.T) {
	for _, tt := range []struct{ doc, want string }{
		{"config: []", "version: missing: give version: 1 or version: 2"},
		{"version: 3", "version: 3 is not a network-config version"},
		{"version: 2\nbonds:\n  bond0:\n    interfaces: []", "bonds.bond0.interfaces: a bond needs its member links"},
		{"version: 2\nbonds:\n  bond0:\n    interfaces: [eth0]\n    parameters: {mode: fastest}", `bonds.bond0.parameters.mode: "fastest"`},
		{"version: 2\nbonds:\n  bond0:\n    interfaces: [eth0]\n    parameters: {transmit-hash-policy: layer9}", `bonds.bond0.parameters.transmit-hash-policy: "layer9"`},
		{"version: 2\nvlans:\n  vlan10: {id: 5000, link: eth0}", "vlans.vlan10.id: 5000 is not a VLAN ID: give 1 to 4094"},
		{"version: 2\nvlans:\n  vlan10: {id: 10}", "vlans.vlan10.link: a VLAN needs its parent link"},
		{"version: 2\nbridges:\n  br0: {interfaces: [eth0]}", "bridges: bridges from a network-config are not supported here: make them in the machine config"},
		{"version: 1\nconfig:\n  - type: vlan\n    name: eth0.10\n    vlan_id: 10", "config[0].vlan_link: a VLAN needs its parent link"},
		{"version: 1\nconfig:\n  - type: vlan\n    name: eth0.10\n    vlan_link: eth0", "config[0].vlan_id: 0 is not a VLAN ID"},
		{"version: 1\nconfig:\n  - type: bond\n    bond_interfaces: [eth0]", "config[0]: a bond entry needs a name"},
		{"version: 1\nconfig:\n  - type: bond\n    name: bond0", "config[0].bond_interfaces: a bond needs its member links"},
		{"version: 1\nconfig:\n  - type: bond\n    name: bond0\n    bond_interfaces: [eth0]\n    params: {bond-miimon: often}", `config[0].params.bond-miimon: "often" is not a number`},
		{"version: 1\nconfig:\n  - type: bond\n    name: bond0\n    bond_interfaces: [eth0]\n    params: {bond-lacp-rate: sometimes}", `config[0].params.bond-lacp-rate: "sometimes"`},
		{"version: 1\nconfig:\n  - type: bridge\n    name: br0", "config[0]: type bridge: bridges from a network-config are not supported here"},
		{"version: 1\nconfig:\n  - type: wifi", `config[0]: type "wifi" is not a network-config v1 entry`},
		{"version: 1\nconfig:\n  - type: physical", "config[0]: a physical entry needs a name or a mac_address"},
		{"version: 1\nconfig:\n  - type: physical\n    name: eth0\n    subnets: [{type: static, address: 10.0.0.5}]", `config[0].subnets[0]: address "10.0.0.5" has no prefix length`},
		{"version: 1\nconfig:\n  - type: physical\n    name: eth0\n    subnets: [{type: static, address: 10.0.0.5, netmask: 255.0.255.0}]", "config[0].subnets[0]: netmask \"255.0.255.0\": its ones are not contiguous"},
		{"version: 1\nconfig:\n  - type: physical\n    name: eth0\n    subnets: [{type: manual}]", `config[0].subnets[0].type: "manual" is not a subnet type`},
		{"version: 2\nethernets:\n  eth0:\n    addresses: [10.0.2.300/24]", `ethernets.eth0.addresses[0]: address "10.0.2.300/24" is not an IP address`},
		{"version: 2\nethernets:\n  eth0:\n    gateway4: gw", `ethernets.eth0.gateway4: gateway "gw" is not an IP address`},
		{"version: 2\nethernets:\n  eth0:\n    routes: [{to: 10.9.0.0/16, via: '2001:db8::1'}]", "ethernets.eth0.routes[0]: the route to 10.9.0.0/16 goes through 2001:db8::1, of the other IP family"},
		{"version: 2\nethernets:\n  eth0:\n    nameservers: {addresses: [dns.example.com]}", `ethernets.eth0.nameservers.addresses[0]: "dns.example.com" is not an IP address`},
		{"version: 2\nethernets:\n  lan:\n    match: {name: 'en*'}", `ethernets.lan.match.name: "en*": a pattern is not matched here`},
		{"version: 2\nethernets:\n  eth0:\n    dhcp4: maybe", "not a network-config"},
	} {
		_, err := ParseNetworkConfig([]byte(tt.doc))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: error %v, want %q", tt.doc, err, tt.want)
		}
	}
}

func TestParseMetadata(t *testing.T) {
	m, err := ParseMetadata(read(t, "libvirt-meta-data"))
	if err != nil {
		t.Fatal(err)
	}

	if want := (Metadata{InstanceID: "iid-local01", LocalHostname: "node-1.example.com", Region: "lab", Zone: "rack-2"}); m != want {
		t.Errorf("got %+v, want %+v", m, want)
	}

	if m, err = ParseMetadata([]byte("instance-id: 1234\nlocal-hostname:\nhostname: h2")); err != nil || m.InstanceID != "1234" || m.LocalHostname != "" {
		t.Errorf("a number and an empty value: %+v, %v", m, err)
	}

	for doc, want := range map[string]string{
		"- a\n- b": "line 1: not a mapping of keys",
		"instance-id: i\nlocal-hostname:\n  - a\n  - b": "line 3: local-hostname is not a string",
		"instance-id: {a: b}":                           "line 1: instance-id is not a string",
		"instance-id: [":                                "not YAML",
	} {
		if _, err := ParseMetadata([]byte(doc)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want %q", doc, err, want)
		}
	}
}

func TestParse(t *testing.T) {
	docs := Documents{Source: "the cidata volume /dev/vdb", MetaData: read(t, "libvirt-meta-data"), NetworkConf: read(t, "netplan-v2.yaml"), UserData: []byte("version: v1alpha1\n")}

	d, err := Parse(docs, "", "")
	if err != nil {
		t.Fatal(err)
	}

	if string(d.Config) != "version: v1alpha1\n" || d.Network.Hostname != "node-1.example.com" || len(d.Network.Links) != 2 {
		t.Errorf("data %+v, network %+v", d, d.Network)
	}

	if want := (runtime.PlatformMetadataSpec{Platform: "nocloud", Hostname: "node-1", InstanceID: "iid-local01", Region: "lab", Zone: "rack-2"}); !reflect.DeepEqual(d.Metadata, want) {
		t.Errorf("metadata %+v, want %+v", d.Metadata, want)
	}

	// The seed's h= and i= win; a #cloud-config is no machine config; no network-config is the
	// boot's own network (no links).
	d, err = Parse(Documents{MetaData: []byte("instance-id: a\nlocal-hostname: b"), UserData: []byte("#cloud-config\nhostname: x\n")}, "seeded", "i-7")
	if err != nil || d.Config != nil || d.Network.Hostname != "seeded" || d.Metadata.InstanceID != "i-7" || len(d.Network.Links) != 0 {
		t.Errorf("got %+v, %v", d, err)
	}

	// Errors name the document and its source.
	docs.NetworkConf = []byte("version: 2\nethernets:\n  eth0:\n    addresses: [x]")
	if _, err = Parse(docs, "", ""); err == nil || !strings.Contains(err.Error(), "nocloud: network-config of the cidata volume /dev/vdb: ethernets.eth0.addresses[0]") {
		t.Errorf("error %v", err)
	}

	docs.MetaData = []byte("local-hostname: [a]")
	if _, err = Parse(docs, "", ""); err == nil || !strings.Contains(err.Error(), "nocloud: meta-data of the cidata volume /dev/vdb: line 1: local-hostname is not a string") {
		t.Errorf("error %v", err)
	}
}

func TestParseSeed(t *testing.T) {
	for in, want := range map[string]seed{
		"ds=nocloud;s=http://10.0.2.2:8080/n1;h=node-1": {url: "http://10.0.2.2:8080/n1/", hostname: "node-1"},
		"ds=nocloud-net;s=https://seed.example/;i=i-1":  {url: "https://seed.example/", instanceID: "i-1"},
		"ds=nocloud": {},
	} {
		s, ok, err := ParseSeed(in)
		if err != nil || !ok || s != want {
			t.Errorf("%q: %+v %v %v, want %+v", in, s, ok, err, want)
		}
	}

	for _, in := range []string{"", "Not Specified", "ds=ec2"} {
		if _, ok, err := ParseSeed(in); ok || err != nil {
			t.Errorf("%q: a seed (%v, %v)", in, ok, err)
		}
	}

	if _, _, err := ParseSeed("ds=nocloud;s=file:///seed/"); err == nil || !strings.Contains(err.Error(), "s=file:///seed/: not an http(s) URL") {
		t.Errorf("a file seed: %v", err)
	}
}

// Data reads a cidata volume's files, or the seed's URL (after bringing the network up), or,
// with neither, gives no config and says so.
func TestData(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{MetaData: "instance-id: i-9\nlocal-hostname: vol-1\n", UserData: "machine: {}\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	var logs []string

	env := platform.Env{
		Cmdline: func(string) string { return "" },
		Volume: func(labels ...string) (string, string, func(), error) {
			if !reflect.DeepEqual(labels, []string{"cidata", "CIDATA"}) {
				t.Errorf("labels %v", labels)
			}

			return dir, "/dev/sr0", func() {}, nil
		},
		NetworkUp: func() error { t.Error("the network was brought up for a volume"); return nil },
		Log:       func(format string, args ...any) { logs = append(logs, fmt.Sprintf(format, args...)) },
	}

	d, err := Nocloud{}.Data(t.Context(), env)
	if err != nil || string(d.Config) != "machine: {}\n" || d.Metadata.Hostname != "vol-1" || d.Metadata.InstanceID != "i-9" {
		t.Fatalf("got %+v, %v", d, err)
	}

	if l := strings.Join(logs, "\n"); !strings.Contains(l, "nocloud: the cidata volume /dev/sr0 has no network-config") || !strings.Contains(l, "nocloud: read meta-data, user-data from the cidata volume /dev/sr0") {
		t.Errorf("logs %q", logs)
	}

	// A seed in the SMBIOS serial: the network comes up, the documents are fetched under it.
	var up bool

	got := map[string]bool{}
	env.Serial = "ds=nocloud;s=http://10.0.2.2:1/seed"
	env.NetworkUp = func() error { up = true; return nil }
	env.Get = func(_ context.Context, url string) ([]byte, error) {
		got[url] = true
		if url == "http://10.0.2.2:1/seed/user-data" {
			return []byte("machine: {type: worker}\n"), nil
		}

		return nil, platform.ErrNotFound
	}

	if d, err = (Nocloud{}).Data(t.Context(), env); err != nil || !up || string(d.Config) != "machine: {type: worker}\n" || len(got) != 3 {
		t.Errorf("seed: %+v, %v, network up %v, fetched %v", d, err, up, got)
	}

	env.Serial = ""
	env.Volume = func(...string) (string, string, func(), error) { return "", "", nil, platform.ErrNoVolume }

	logs = nil
	if d, err = (Nocloud{}).Data(t.Context(), env); err != nil || d.Config != nil || d.Network != nil || d.Metadata.Platform != "nocloud" {
		t.Errorf("no source: %+v, %v", d, err)
	}

	if !strings.Contains(strings.Join(logs, "\n"), "no volume labelled cidata and no ds=nocloud;s=<url> seed") {
		t.Errorf("logs %q", logs)
	}
}

func TestCheck(t *testing.T) {
	if err := platform.Check("no-such-cloud"); err == nil || err.Error() != `talos.platform="no-such-cloud" is not a platform this node boots on: give one of `+strings.Join(platform.Known, ", ") {
		t.Errorf("error %v", err)
	}

	if err := platform.Check("nocloud"); err != nil {
		t.Error(err)
	}
}
