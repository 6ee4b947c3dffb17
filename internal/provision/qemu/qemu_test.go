package qemu

import (
	"bytes"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/talos-go/talos/internal/udev"
)

func TestMACsDifferPerNode(t *testing.T) {
	a, b := macFor(netip.MustParseAddr("10.5.0.2")), macFor(netip.MustParseAddr("10.5.0.3"))
	if a != "52:54:00:05:00:02" || a == b {
		t.Fatalf("MACs %s %s", a, b)
	}
}

// The metal-iso image: ISO 9660 labelled metal-iso, the config as config.yaml.
func TestMakeConfigISO(t *testing.T) {
	if _, err := exec.LookPath("xorriso"); err != nil {
		t.Skip("no xorriso")
	}

	dir := t.TempDir()
	config := filepath.Join(dir, "node.yaml")

	if err := os.WriteFile(config, []byte("version: v1alpha1 # the node's\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	out := filepath.Join(dir, "config.iso")
	if err := makeConfigISO(config, out); err != nil {
		t.Fatal(err)
	}

	v, err := udev.Probe(out)
	if err != nil || v.Filesystem != "iso9660" || v.Label != "metal-iso" {
		t.Fatalf("probed %+v, %v", v, err)
	}

	b, _ := os.ReadFile(out)
	if !bytes.Contains(b, []byte("CONFIG.YAML")) && !bytes.Contains(b, []byte("config.yaml")) || !bytes.Contains(b, []byte("version: v1alpha1 # the node's")) {
		t.Error("the ISO does not hold the config as config.yaml")
	}
}
