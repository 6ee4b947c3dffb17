package aws

import (
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"

	"github.com/talos-go/talos/internal/platform"
	"github.com/talos-go/talos/internal/platform/internal/platformtest"
)

const testToken = "AQAEAFh0b2tlbi1mb3ItdGVzdHM="

// imds stands in for EC2's instance metadata service: IMDSv2 (a PUT for a token, which every
// GET must carry) serving recorded documents; v1 serves them without a token, and no token PUT.
type imds struct {
	docs   map[string][]byte
	v1     bool
	tokens atomic.Int32
}

func (s *imds) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/latest/api/token" && !s.v1 {
		if r.Method != http.MethodPut || r.Header.Get(TokenTTLHeader) == "" {
			http.Error(w, "a token is a PUT with "+TokenTTLHeader, http.StatusBadRequest)

			return
		}

		s.tokens.Add(1)
		w.Write([]byte(testToken))

		return
	}

	if !s.v1 && r.Header.Get(TokenHeader) != testToken {
		http.Error(w, "", http.StatusUnauthorized)

		return
	}

	b, ok := s.docs[r.URL.Path]
	if r.Method != http.MethodGet || !ok {
		http.NotFound(w, r)

		return
	}

	w.Write(b)
}

func serve(t *testing.T, s *imds) (AWS, *platformtest.Env) {
	t.Helper()

	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)

	return AWS{Endpoint: srv.URL, EndpointIPv6: notThere(t)}, &platformtest.Env{}
}

// notThere is the URL of a server that was closed: nothing answers there.
func notThere(t *testing.T) string {
	t.Helper()

	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close()

	return srv.URL
}

func recorded(t *testing.T, name string) map[string][]byte {
	return platformtest.Documents(t, filepath.Join("testdata", name))
}

// A dual-stack spot instance with two cards, tags in its metadata and user data: every key is
// read with the session token, the primary card (device-number 0, listed second) asks DHCPv4 and
// DHCPv6 and gets EC2's IPv6 resolver.
func TestDataDualStackSpot(t *testing.T) {
	s := &imds{docs: recorded(t, "dualstack-spot.json")}
	p, env := serve(t, s)

	d, err := p.Data(t.Context(), env.Platform())
	if err != nil {
		t.Fatal(err)
	}

	if string(d.Config) != "version: v1alpha1\nmachine:\n  type: worker\n" {
		t.Errorf("config %q", d.Config)
	}

	wantNet := &platform.Network{
		Hostname:    "ip-172-31-20-14.eu-west-1.compute.internal",
		Links:       []platform.Link{{MAC: "06:5a:3c:11:90:01", DHCP4: true, DHCP6: true}},
		Resolvers:   []netip.Addr{netip.MustParseAddr("fd00:ec2::253")},
		TimeServers: []string{"169.254.169.123", "fd00:ec2::123"},
	}
	wantNet.ExternalIPs = []netip.Addr{netip.MustParseAddr("54.170.3.21")} // public-ipv4
	if !reflect.DeepEqual(d.Network, wantNet) {
		t.Errorf("network %+v\nwant    %+v", d.Network, wantNet)
	}

	want := runtime.PlatformMetadataSpec{
		Platform: "aws", Hostname: "ip-172-31-20-14.eu-west-1.compute.internal", Region: "eu-west-1", Zone: "eu-west-1b",
		InstanceType: "m6i.large", InstanceID: "i-0be3f4a6c1d2e7f80", ProviderID: "aws:///eu-west-1b/i-0be3f4a6c1d2e7f80", Spot: true,
		InternalDNS: "ip-172-31-20-14.eu-west-1.compute.internal", ExternalDNS: "ec2-54-170-3-21.eu-west-1.compute.amazonaws.com",
		Tags: map[string]string{"Name": "prod-worker-3", "cluster:prod": "owned"},
	}
	if !reflect.DeepEqual(d.Metadata, want) {
		t.Errorf("metadata %+v\nwant     %+v", d.Metadata, want)
	}

	if env.Ups != 1 || s.tokens.Load() != 1 {
		t.Errorf("network brought up %d times, %d tokens taken", env.Ups, s.tokens.Load())
	}

	if r := env.Request[0]; r.Method != http.MethodPut || r.Header.Get(TokenTTLHeader) != tokenTTL {
		t.Errorf("first request %+v, want the token's PUT", r)
	}
}

// An IPv6-only on-demand instance without user data: DHCPv6 only, no spot, no tags, and
// maintenance mode, said on the console.
func TestDataIPv6OnlyNoUserData(t *testing.T) {
	p, env := serve(t, &imds{docs: recorded(t, "ipv6only-ondemand.json")})

	d, err := p.Data(t.Context(), env.Platform())
	if err != nil {
		t.Fatal(err)
	}

	if d.Config != nil || !strings.Contains(env.Logged(), "aws: the instance has no user data") {
		t.Errorf("config %q, console %q", d.Config, env.Logged())
	}

	if l := d.Network.Links; !reflect.DeepEqual(l, []platform.Link{{MAC: "02:7f:b1:9c:44:e5", DHCP6: true}}) {
		t.Errorf("links %+v", l)
	}

	if m := d.Metadata; m.Spot || m.Tags != nil || m.ProviderID != "aws:///us-east-2a/i-0c1d2e3f405162738" || m.Region != "us-east-2" || m.ExternalDNS != "" {
		t.Errorf("metadata %+v", m)
	}
}

// A service without IMDSv2 (the token's URL is not there) is asked without a token; a service
// that lists no card leaves the boot's network, with EC2's time servers.
func TestDataIMDSv1(t *testing.T) {
	docs := recorded(t, "dualstack-spot.json")
	maps.DeleteFunc(docs, func(k string, _ []byte) bool { return strings.Contains(k, "/network/") })

	p, env := serve(t, &imds{docs: docs, v1: true})

	d, err := p.Data(t.Context(), env.Platform())
	if err != nil || d.Config == nil || d.Metadata.InstanceID != "i-0be3f4a6c1d2e7f80" {
		t.Fatalf("got %+v, %v", d, err)
	}

	if d.Network.Links != nil || d.Network.Resolvers != nil || len(d.Network.TimeServers) != 2 {
		t.Errorf("network %+v", d.Network)
	}

	if !strings.Contains(env.Logged(), "without a session token (IMDSv1)") {
		t.Errorf("console %q", env.Logged())
	}
}

// A service that refuses, or is not there, is an error naming the URL.
func TestDataRefused(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "", http.StatusForbidden) }))
	defer srv.Close()

	env := &platformtest.Env{}

	_, err := AWS{Endpoint: srv.URL, EndpointIPv6: srv.URL}.Data(t.Context(), env.Platform())
	if err == nil || !strings.Contains(err.Error(), "aws: no IMDSv2 session token from the instance metadata service at either of its addresses: PUT "+srv.URL+"/latest/api/token") || !strings.Contains(err.Error(), "403") {
		t.Errorf("error %v", err)
	}

	// A token, then a GET refused.
	s := &imds{docs: recorded(t, "dualstack-spot.json")}
	srv2 := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/latest/meta-data/instance-type" {
			http.Error(w, "", http.StatusInternalServerError)

			return
		}

		s.ServeHTTP(w, r)
	}))
	defer srv2.Close()

	_, err = AWS{Endpoint: srv2.URL, EndpointIPv6: notThere(t)}.Data(t.Context(), env.Platform())
	if err == nil || !strings.Contains(err.Error(), "aws: the instance metadata service did not answer "+srv2.URL+"/latest/meta-data/instance-type") {
		t.Errorf("error %v", err)
	}

	srv2.Close()

	ipv6 := notThere(t)
	if _, err = (AWS{Endpoint: srv2.URL, EndpointIPv6: ipv6}).Data(t.Context(), env.Platform()); err == nil ||
		!strings.Contains(err.Error(), srv2.URL+"/latest/api/token") || !strings.Contains(err.Error(), ipv6+"/latest/api/token") {
		t.Errorf("a service not there: %v", err)
	}
}

// An instance whose metadata service answers only at its IPv6 address (an IPv6-only instance)
// is read there: the IPv4 address is tried too, and nothing answers at it.
func TestDataIPv6Endpoint(t *testing.T) {
	l, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback to serve the IPv6 endpoint at: %v", err)
	}

	srv := httptest.NewUnstartedServer(&imds{docs: recorded(t, "ipv6only-ondemand.json")})
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)

	env := &platformtest.Env{}
	ipv4 := notThere(t)

	d, err := AWS{Endpoint: ipv4, EndpointIPv6: srv.URL}.Data(t.Context(), env.Platform())
	if err != nil || d.Metadata.InstanceID != "i-0c1d2e3f405162738" {
		t.Fatalf("got %+v, %v", d, err)
	}

	for _, r := range env.Request {
		if !strings.HasPrefix(r.URL, srv.URL+"/") && r.URL != ipv4+"/latest/api/token" {
			t.Errorf("asked %s: neither the IPv6 endpoint nor the IPv4 one's token", r.URL)
		}
	}

	if !strings.Contains(env.Logged(), "aws: the instance metadata service answers at "+srv.URL+" (IPv6), not at "+ipv4) {
		t.Errorf("console %q", env.Logged())
	}
}

// Malformed documents are refused naming the key.
func TestParseRefuses(t *testing.T) {
	const src = "http://169.254.169.254/latest/meta-data/"

	good := Metadata{MACs: "0e:00:00:00:00:01/", Interfaces: map[string]Interface{"0e:00:00:00:00:01": {DeviceNumber: "0", LocalIPv4s: "10.0.0.5"}}}

	for _, tt := range []struct {
		edit func(*Metadata)
		want string
	}{
		{func(m *Metadata) { m.Hostname = "ip 10" }, src + "hostname: \"ip 10\" is not a hostname"},
		{func(m *Metadata) { m.PublicIPv4 = "54.1.2" }, src + `public-ipv4: "54.1.2" is not an IP address`},
		{func(m *Metadata) { m.MACs = "0e:00:00:00:00:01/\nnot-a-mac/" }, src + `network/interfaces/macs/: "not-a-mac" is not a MAC address`},
		{func(m *Metadata) { m.Interfaces["0e:00:00:00:00:01"] = Interface{DeviceNumber: "first"} }, src + `network/interfaces/macs/0e:00:00:00:00:01/device-number: "first" is not a number`},
		{func(m *Metadata) { m.Interfaces["0e:00:00:00:00:01"] = Interface{LocalIPv4s: "10.0.0.5\n10.0.0.300"} }, src + `network/interfaces/macs/0e:00:00:00:00:01/local-ipv4s: line 2: "10.0.0.300" is not an IPv4 address`},
		{func(m *Metadata) { m.Interfaces["0e:00:00:00:00:01"] = Interface{IPv6s: "10.0.0.5"} }, src + `network/interfaces/macs/0e:00:00:00:00:01/ipv6s: line 1: "10.0.0.5" is not an IPv6 address`},
	} {
		m := good
		m.Interfaces = maps.Clone(good.Interfaces)
		tt.edit(&m)

		if _, err := Parse(m, src); err == nil || !strings.Contains(err.Error(), "aws: "+tt.want) {
			t.Errorf("error %v, want %q", err, tt.want)
		}
	}

	if d, err := Parse(good, src); err != nil || len(d.Network.Links) != 1 || !d.Network.Links[0].DHCP4 || d.Network.Links[0].DHCP6 {
		t.Errorf("good: %+v, %v", d, err)
	}
}
