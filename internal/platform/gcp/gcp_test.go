package gcp

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"

	"github.com/talos-go/talos/internal/platform"
	"github.com/talos-go/talos/internal/platform/internal/platformtest"
)

// metadataServer stands in for Compute Engine's metadata server: recorded documents, served
// only to requests with Metadata-Flavor: Google (403 otherwise, as the server does).
func metadataServer(t *testing.T, file string) (*httptest.Server, map[string][]byte) {
	t.Helper()

	docs := platformtest.Documents(t, filepath.Join("testdata", file))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(FlavorHeader) != Flavor {
			http.Error(w, "Missing Metadata-Flavor:Google header.", http.StatusForbidden)

			return
		}

		b, ok := docs[r.URL.RequestURI()]
		if !ok {
			http.NotFound(w, r)

			return
		}

		w.Header().Set(FlavorHeader, Flavor)
		w.Write(b)
	}))
	t.Cleanup(srv.Close)

	return srv, docs
}

// A spot (preemptible) instance with two cards, the first dual-stack, tags and user data: every
// field is mapped.
func TestDataSpotDualStack(t *testing.T) {
	srv, _ := metadataServer(t, "spot-dualstack.json")
	env := &platformtest.Env{}

	d, err := GCP{Endpoint: srv.URL}.Data(t.Context(), env.Platform())
	if err != nil {
		t.Fatal(err)
	}

	if string(d.Config) != "version: v1alpha1\nmachine:\n  type: controlplane\n" {
		t.Errorf("config %q", d.Config)
	}

	wantNet := &platform.Network{
		Hostname: "cp-1.europe-west4-b.c.acme-prod-4821.internal",
		Links: []platform.Link{
			{MAC: "42:01:0a:a4:00:07", MTU: 1460, DHCP4: true, Addresses: []netip.Prefix{netip.MustParsePrefix("2600:1900:4040:9c1:0:3::/96")},
				Routes: []platform.Route{{Via: netip.MustParseAddr("fe80::56:a1ff:fe3c:1")}}},
			{MAC: "42:01:0a:14:00:03", MTU: 8896, DHCP4: true},
		},
		Resolvers:   []netip.Addr{netip.MustParseAddr("169.254.169.254")},
		TimeServers: []string{"metadata.google.internal"},
		ExternalIPs: []netip.Addr{netip.MustParseAddr("34.90.12.77")}, // the first card's ONE_TO_ONE_NAT
	}
	if !reflect.DeepEqual(d.Network, wantNet) {
		t.Errorf("network %+v\nwant    %+v", d.Network, wantNet)
	}

	want := runtime.PlatformMetadataSpec{
		Platform: "gcp", Hostname: "cp-1.europe-west4-b.c.acme-prod-4821.internal", Region: "europe-west4", Zone: "europe-west4-b",
		InstanceType: "e2-standard-4", InstanceID: "5713921043880291342", ProviderID: "gce://acme-prod-4821/europe-west4-b/cp-1", Spot: true,
		Tags: map[string]string{"talos": "", "control-plane": ""},
	}
	if !reflect.DeepEqual(d.Metadata, want) {
		t.Errorf("metadata %+v\nwant     %+v", d.Metadata, want)
	}

	if env.Ups != 1 {
		t.Errorf("network brought up %d times", env.Ups)
	}

	for _, r := range env.Request {
		if r.Header.Get(FlavorHeader) != Flavor || !strings.HasPrefix(r.URL, srv.URL+"/computeMetadata/v1/") {
			t.Errorf("request %+v", r)
		}
	}
}

// A standard instance without user data: maintenance mode, said on the console; no spot, no
// tags, one card without IPv6.
func TestDataNoUserData(t *testing.T) {
	srv, _ := metadataServer(t, "standard-no-user-data.json")
	env := &platformtest.Env{}

	d, err := GCP{Endpoint: srv.URL}.Data(t.Context(), env.Platform())
	if err != nil {
		t.Fatal(err)
	}

	if d.Config != nil || !strings.Contains(env.Logged(), "gcp: the instance has no user-data attribute ("+srv.URL+"/computeMetadata/v1/instance/attributes/user-data)") {
		t.Errorf("config %q, console %q", d.Config, env.Logged())
	}

	if m := d.Metadata; m.Spot || m.Tags != nil || m.Region != "us-central1" || m.Zone != "us-central1-f" || m.InstanceType != "n2-standard-2" || m.ProviderID != "gce://lab-1177/us-central1-f/worker-a" {
		t.Errorf("metadata %+v", m)
	}

	if l := d.Network.Links; !reflect.DeepEqual(l, []platform.Link{{MAC: "42:01:0a:80:00:0c", MTU: 1460, DHCP4: true}}) {
		t.Errorf("links %+v", l)
	}
}

// A server that refuses, is not there, or lacks a document the node needs: an error naming the
// URL.
func TestDataRefused(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "", http.StatusForbidden) }))
	defer srv.Close()

	env := &platformtest.Env{}

	_, err := GCP{Endpoint: srv.URL}.Data(t.Context(), env.Platform())
	if err == nil || !strings.Contains(err.Error(), "gcp: the metadata server did not answer "+srv.URL+"/computeMetadata/v1/instance/attributes/user-data") || !strings.Contains(err.Error(), "403") {
		t.Errorf("error %v", err)
	}

	srv.Close()

	if _, err = (GCP{Endpoint: srv.URL}).Data(t.Context(), env.Platform()); err == nil || !strings.Contains(err.Error(), srv.URL+"/computeMetadata/v1/") {
		t.Errorf("a server not there: %v", err)
	}

	srv2, docs := metadataServer(t, "standard-no-user-data.json")
	delete(docs, "/computeMetadata/v1/instance/zone")

	if _, err = (GCP{Endpoint: srv2.URL}).Data(t.Context(), env.Platform()); err == nil || err.Error() != "gcp: the metadata server has no "+srv2.URL+"/computeMetadata/v1/instance/zone (404)" {
		t.Errorf("no zone: %v", err)
	}
}

// Malformed documents are refused naming the document and the field.
func TestParseRefuses(t *testing.T) {
	const src = "http://169.254.169.254/computeMetadata/v1/"

	good := Metadata{ProjectID: "p", Name: "n", Hostname: "n.c.p.internal", ID: "1", MachineType: "projects/1/machineTypes/e2-micro", Zone: "projects/1/zones/us-east1-b"}

	for _, tt := range []struct {
		edit func(*Metadata)
		want string
	}{
		{func(m *Metadata) { m.Hostname = "n_1.c.p.internal" }, src + `instance/hostname: "n_1.c.p.internal" is not a hostname`},
		{func(m *Metadata) { m.Preemptible = "yes" }, src + `instance/scheduling/preemptible: "yes" is neither TRUE nor FALSE`},
		{func(m *Metadata) { m.Tags = `{"a": 1}` }, src + "instance/tags: not a JSON list of strings"},
		{func(m *Metadata) { m.NetworkInterfaces = `{"mac": "x"}` }, src + NetworkInterfaces + ": not a JSON list of network interfaces"},
		{func(m *Metadata) { m.NetworkInterfaces = `[{"mac": "42:01:0a"}]` }, src + NetworkInterfaces + `: [0].mac: "42:01:0a" is not a MAC address`},
		{func(m *Metadata) { m.NetworkInterfaces = `[{}, {"mtu": 100}]` }, src + NetworkInterfaces + ": [1].mtu: 100 is not an MTU of a VPC"},
		{func(m *Metadata) { m.NetworkInterfaces = `[{"ip": "10.0.0"}]` }, src + NetworkInterfaces + `: [0].ip: "10.0.0" is not an IPv4 address`},
		{func(m *Metadata) { m.NetworkInterfaces = `[{"gatewayIpv6": "10.0.0.1"}]` }, src + NetworkInterfaces + `: [0].gatewayIpv6: "10.0.0.1" is not an IPv6 address`},
		{func(m *Metadata) { m.NetworkInterfaces = `[{"ipv6": ["2600:1900::1"]}]` }, src + NetworkInterfaces + `: [0].ipv6[0]: "2600:1900::1" is not an IPv6 range`},
		{func(m *Metadata) {
			m.NetworkInterfaces = `[{"accessConfigs": [{"type": "ONE_TO_ONE_NAT", "externalIp": "34.90.12"}]}]`
		},
			src + NetworkInterfaces + `: [0].accessConfigs[0].externalIp: "34.90.12" is not an IP address`},
	} {
		m := good
		tt.edit(&m)

		if _, err := Parse(m, src); err == nil || !strings.Contains(err.Error(), "gcp: "+tt.want) {
			t.Errorf("error %v, want %q", err, tt.want)
		}
	}

	// No MAC: upstream's eth<index>; IPv6 ranges without a gateway are not set, as upstream.
	m := good
	m.NetworkInterfaces = `[{"mtu": 1460, "ipv6": ["2600:1900::/96"]}]`

	d, err := Parse(m, src)
	if err != nil || !reflect.DeepEqual(d.Network.Links, []platform.Link{{Name: "eth0", MTU: 1460, DHCP4: true}}) || d.Metadata.Region != "us-east1" {
		t.Errorf("got %+v, %v", d, err)
	}
}
