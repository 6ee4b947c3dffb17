package provision

import (
	"net/netip"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
)

// A config that names no discovery service gets the cluster's; one that names one keeps it.
func TestDefaultDiscoveryEndpoint(t *testing.T) {
	cfgs, err := GenerateConfigs("de", netip.MustParseAddr("127.5.63.2"), "", GenerateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	const ours = "http://127.5.63.1:41000/"

	for _, tc := range []struct {
		patches []string
		want    string
	}{
		{nil, ours},
		{[]string{`{"cluster": {"discovery": {"registries": {"service": {"endpoint": "https://other.test/"}}}}}`}, "https://other.test/"},
	} {
		in, err := patch(cfgs.Worker, tc.patches)
		if err != nil {
			t.Fatal(err)
		}

		out, err := defaultDiscoveryEndpoint(in, ours)
		if err != nil {
			t.Fatal(err)
		}

		cfg, err := configloader.NewFromBytes(out)
		if err != nil {
			t.Fatal(err)
		}

		if got := cfg.Cluster().Discovery().Registries().Service().Endpoint(); got != tc.want {
			t.Errorf("patches %v: endpoint %s, want %s", tc.patches, got, tc.want)
		}
	}
}
