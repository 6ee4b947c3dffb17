package provision

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"

	"github.com/talos-go/talos/internal/testenv"
)

// A qemu node's config names the cluster's gateway (where the network process serves NTP) as
// its time server unless the config already names servers: those stay, alone.
func TestDefaultTimeServer(t *testing.T) {
	_, cp, _ := testenv.Configs(t, "10.5.0.2")
	gw := netip.MustParseAddr("10.5.0.1")

	servers := func(cfg []byte) []string {
		t.Helper()

		c, err := configloader.NewFromBytes(cfg)
		if err != nil {
			t.Fatal(err)
		}

		return c.Machine().Time().Servers()
	}

	out, err := defaultTimeServer(cp, gw)
	if err != nil {
		t.Fatal(err)
	}

	if got := servers(out); !slices.Equal(got, []string{"10.5.0.1"}) {
		t.Errorf("no servers in the config: %v, want the gateway", got)
	}

	named, err := patch(cp, []string{`{"machine": {"time": {"servers": ["ntp.example"]}}}`})
	if err != nil {
		t.Fatal(err)
	}

	if out, err = defaultTimeServer(named, gw); err != nil {
		t.Fatal(err)
	}

	if got := servers(out); !slices.Equal(got, []string{"ntp.example"}) {
		t.Errorf("the user's server: %v, want it alone", got)
	}
}
