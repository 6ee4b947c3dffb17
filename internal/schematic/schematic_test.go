package schematic_test

import (
	"strings"
	"testing"

	"github.com/talos-go/talos/internal/schematic"
)

// The factory's well-known IDs: the vanilla schematic, and the one with only the
// qemu-guest-agent extension (published by the factory and quoted in Talos' docs).
func TestIDsAreTheFactorys(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, id string
	}{
		{"vanilla", "customization: {}\n", schematic.VanillaID},
		{"qemu-guest-agent", "customization:\n  systemExtensions:\n    officialExtensions:\n      - siderolabs/qemu-guest-agent\n",
			"ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515"},
		// The same schematic written otherwise (indent, flow style, a comment) has the same ID.
		{"qemu-guest-agent, flow style", "# ours\ncustomization: {systemExtensions: {officialExtensions: [siderolabs/qemu-guest-agent]}}",
			"ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := schematic.Unmarshal([]byte(tc.yaml))
			if err != nil {
				t.Fatal(err)
			}

			id, err := s.ID()
			if err != nil {
				t.Fatal(err)
			}

			if id != tc.id {
				b, _ := s.Marshal()
				t.Errorf("ID %s, want %s; marshalled:\n%s", id, tc.id, b)
			}
		})
	}

	if id, _ := (&schematic.Schematic{}).ID(); id != schematic.VanillaID {
		t.Errorf("the zero Schematic's ID is %s, want the vanilla %s", id, schematic.VanillaID)
	}
}

// Every field reads, and marshals back in the factory's order with its key names; META keys are
// written as hex as in the factory's docs and read as numbers.
func TestRoundTrip(t *testing.T) {
	in := `overlay:
  image: registry.local/sbc
  name: rpi_generic
  options: {data: x}
customization:
  extraKernelArgs: [console=ttyS1, talos.dashboard.disabled=1]
  meta:
    - key: 0xa
      value: '{"a": 1}'
  systemExtensions:
    officialExtensions: [siderolabs/gvisor]
  secureboot:
    includeWellKnownCertificates: true
`

	s, err := schematic.Unmarshal([]byte(in))
	if err != nil {
		t.Fatal(err)
	}

	if len(s.Customization.Meta) != 1 || s.Customization.Meta[0].Key != 0x0a || s.Customization.Meta[0].Value != `{"a": 1}` {
		t.Errorf("meta %+v", s.Customization.Meta)
	}

	b, err := s.Marshal()
	if err != nil {
		t.Fatal(err)
	}

	want := `overlay:
    image: registry.local/sbc
    name: rpi_generic
    options:
        data: x
customization:
    extraKernelArgs:
        - console=ttyS1
        - talos.dashboard.disabled=1
    meta:
        - key: 10
          value: '{"a": 1}'
    systemExtensions:
        officialExtensions:
            - siderolabs/gvisor
    secureboot:
        includeWellKnownCertificates: true
`
	if string(b) != want {
		t.Errorf("marshalled:\n%s\nwant:\n%s", b, want)
	}

	again, err := schematic.Unmarshal(b)
	if err != nil {
		t.Fatal(err)
	}

	id1, _ := s.ID()
	id2, _ := again.ID()

	if id1 != id2 || id1 == schematic.VanillaID {
		t.Errorf("IDs %s and %s after a round trip", id1, id2)
	}
}

func TestUnmarshalRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"unknown field", "customization:\n  extraKernelArg: [a]\n", "field extraKernelArg not found"},
		{"unknown top-level field", "customisation: {}\n", "field customisation not found"},
		{"META key out of range", "customization:\n  meta:\n    - key: 256\n      value: x\n", "256"},
		{"empty", "", "customization: {}"},
		{"two documents", "customization: {}\n---\ncustomization: {}\n", "one document"},
		{"not a mapping", "- a\n", "cannot unmarshal"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := schematic.Unmarshal([]byte(tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}
