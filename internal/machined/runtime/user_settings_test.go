package runtime_test

import (
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/container"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"

	"github.com/talos-go/talos/internal/machined/runtime"
	"github.com/talos-go/talos/internal/testenv"
)

// TestValidateRefusesUserSettings: Validate, which every config passes, refuses a machine.files
// path outside /var, an unknown op, a bad machine.env name and a bad extraHostEntries IP, each
// naming its field; the upstream forms are taken.
func TestValidateRefusesUserSettings(t *testing.T) {
	full := string(testenv.Config(t, machine.TypeWorker, "127.5.0.1"))
	r := &runtime.Runtime{Mode: runtime.Mode{Kind: runtime.Process}}

	withMachine := func(extra string) string {
		return strings.Replace(full, "\nmachine:\n", "\nmachine:\n"+extra, 1)
	}

	for _, tc := range []struct {
		name, extra, want string
	}{
		{"upstream forms", "    env:\n        https_proxy: http://10.5.0.1:3128\n    files:\n        - {op: create, path: /var/etc/a.conf, content: x, permissions: 0o600}\n" +
			"        - {op: create, path: /etc/cri/conf.d/20-customization.part, content: \"[metrics]\\naddress = '0.0.0.0:11234'\\n\", permissions: 0o644}\n", ""},
		{"file outside /var", "    files:\n        - {op: create, path: /etc/motd, content: x, permissions: 0o644}\n",
			`machine.files[0].path "/etc/motd": the root is read-only, files go under /var only`},
		{"unknown op", "    files:\n        - {op: replace, path: /var/x, content: x, permissions: 0o644}\n", `machine.files[0].op "replace": unknown op`},
		{"env name", "    env:\n        \"A=B\": x\n", `machine.env["A=B"]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := configloader.NewFromBytes([]byte(withMachine(tc.extra)))
			if err != nil {
				t.Fatalf("loading: %v", err)
			}

			_, err = r.Validate(cfg)

			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}

	// extraHostEntries: the generated config has its network section already.
	cfg, err := configloader.NewFromBytes([]byte(full))
	if err != nil {
		t.Fatalf("loading: %v", err)
	}

	doc := cfg.RawV1Alpha1().DeepCopy()
	if doc.MachineConfig.MachineNetwork == nil {
		doc.MachineConfig.MachineNetwork = &v1alpha1.NetworkConfig{}
	}

	doc.MachineConfig.MachineNetwork.ExtraHostEntries = []*v1alpha1.ExtraHost{
		{HostIP: "192.168.1.100", HostAliases: []string{"ok"}}, {HostIP: "not-an-ip", HostAliases: []string{"x"}},
	}

	if cfg, err = container.New(doc); err != nil {
		t.Fatal(err)
	}

	if _, err = r.Validate(cfg); err == nil || !strings.Contains(err.Error(), `machine.network.extraHostEntries[1].ip "not-an-ip": not an IP address`) ||
		strings.Contains(err.Error(), "extraHostEntries[0]") {
		t.Fatalf("error %v, want extraHostEntries[1].ip only", err)
	}
}
