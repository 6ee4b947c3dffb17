package platform_test

import (
	"net/netip"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"

	"github.com/talos-go/talos/internal/platform"
)

// What the boot writes machined reads back, but the user data: it holds the machine's secrets,
// and machined has it from its config file.
func TestWriteRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "platform.json")

	if _, ok, err := platform.Read(path); ok || err != nil {
		t.Fatalf("nothing written: ok %v, %v", ok, err)
	}

	p := platform.Published{
		Data: platform.Data{
			Config:   []byte("machine: {token: secret}"),
			Network:  &platform.Network{Hostname: "n1.lab", Resolvers: []netip.Addr{netip.MustParseAddr("10.0.2.3")}, Links: []platform.Link{{Name: "eth0", Routes: []platform.Route{{Via: netip.MustParseAddr("10.0.2.2")}}}}},
			Metadata: runtime.PlatformMetadataSpec{Platform: "nocloud", Hostname: "n1", InstanceID: "i-1"},
		},
		DHCPLinks: []string{"eth1"},
	}

	if err := platform.Write(path, p); err != nil {
		t.Fatal(err)
	}

	got, ok, err := platform.Read(path)
	if err != nil || !ok {
		t.Fatalf("ok %v, %v", ok, err)
	}

	p.Config = nil
	if !reflect.DeepEqual(got, p) {
		t.Errorf("read %+v\nwant %+v", got, p)
	}

	if host, domain := got.Network.HostnameParts(); host != "n1" || domain != "lab" {
		t.Errorf("hostname parts %q %q", host, domain)
	}
}
