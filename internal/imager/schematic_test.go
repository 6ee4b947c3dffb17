package imager

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/talos-go/talos/internal/schematic"
)

// `imager build --schematic` carries the schematic in the signed image (a payload file the
// manifest lists, its ID in the manifest); the slot it unpacks to reads back the same ID; the
// installer image is named and labelled by it, as the Image Factory names installers.
func TestBuildWithSchematic(t *testing.T) {
	dir := t.TempDir()

	if _, err := GenerateKey(filepath.Join(dir, "k.key"), filepath.Join(dir, "k.pub")); err != nil {
		t.Fatal(err)
	}

	for _, f := range []string{VmlinuzName, InitramfsName, MachinedName, EtcdName} {
		os.WriteFile(filepath.Join(dir, f), []byte(f), 0o644)
	}

	sch := filepath.Join(dir, "s.yaml")
	os.WriteFile(sch, []byte("customization:\n  extraKernelArgs: [talos.test=1]\n  meta:\n    - key: 0xa0\n      value: hello\n"), 0o644)

	want, err := (&schematic.Schematic{Customization: schematic.Customization{
		ExtraKernelArgs: []string{"talos.test=1"}, Meta: []schematic.MetaValue{{Key: 0xa0, Value: "hello"}},
	}}).ID()
	if err != nil {
		t.Fatal(err)
	}

	img := filepath.Join(dir, "metal.img")

	var stdout strings.Builder
	if err = Main([]string{"build", "--key", filepath.Join(dir, "k.key"), "--version", "v1.2.3", "--vmlinuz", filepath.Join(dir, VmlinuzName),
		"--initramfs", filepath.Join(dir, InitramfsName), "--schematic", sch, "--out", img}, &stdout); err != nil {
		t.Fatal(err)
	}

	if !strings.Contains(stdout.String(), "schematic "+want) {
		t.Errorf("build's output names no schematic %s:\n%s", want, stdout.String())
	}

	keys, _ := LoadPublicKeys(filepath.Join(dir, "k.pub"))

	slot := filepath.Join(dir, "slot")

	m, err := Extract(img, keys, slot)
	if err != nil {
		t.Fatal(err)
	}

	if _, ok := m.file(SchematicName); !ok || m.Schematic != want {
		t.Errorf("manifest: schematic %q (want %s), files %+v", m.Schematic, want, m.Files)
	}

	s, id, err := ReadSlotSchematic(slot)
	if err != nil || id != want || len(s.Customization.Meta) != 1 {
		t.Errorf("the slot's schematic: %s, %+v, %v", id, s, err)
	}

	if _, id, err = ReadSlotSchematic(dir); id != "" || err != nil {
		t.Errorf("a slot without a schematic: %q, %v", id, err)
	}

	out := filepath.Join(dir, "installer.tar")
	if err = Main([]string{"installer", "--image", img, "--pub", filepath.Join(dir, "k.pub"), "--out", out}, io.Discard); err != nil {
		t.Fatal(err)
	}

	oci, err := tarball.ImageFromPath(out, nil)
	if err != nil {
		t.Fatal(err)
	}

	cf, err := oci.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}

	if cf.Config.Labels[InstallerSchematicLabel] != want {
		t.Errorf("installer labels %v, want %s=%s", cf.Config.Labels, InstallerSchematicLabel, want)
	}

	manifest, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(out) })
	if err != nil {
		t.Fatal(err)
	}

	if tags := manifest[0].RepoTags; len(tags) != 1 || tags[0] != "talos-go/installer/"+want+":v1.2.3" {
		t.Errorf("archive tags %v, want talos-go/installer/%s:v1.2.3", tags, want)
	}
}

func TestPushReference(t *testing.T) {
	withID := &Manifest{Version: "v1.2.3", Schematic: "abc"}
	vanilla := &Manifest{Version: "v1.2.3"}

	for _, tc := range []struct {
		push string
		man  *Manifest
		want string
	}{
		{"reg:5000/talos/installer:v9", withID, "reg:5000/talos/installer:v9"},
		{"reg:5000/talos/installer@sha256:00", withID, "reg:5000/talos/installer@sha256:00"},
		{"reg:5000/talos", withID, "reg:5000/talos/installer/abc:v1.2.3"},
		{"reg:5000/talos/", vanilla, "reg:5000/talos/installer/" + schematic.VanillaID + ":v1.2.3"},
	} {
		if got := pushReference(tc.push, tc.man); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.push, got, tc.want)
		}
	}
}

// What images here cannot carry is refused naming the schematic's field, before anything is built.
func TestBuildRefusesSchematic(t *testing.T) {
	dir := t.TempDir()

	if _, err := GenerateKey(filepath.Join(dir, "k.key"), filepath.Join(dir, "k.pub")); err != nil {
		t.Fatal(err)
	}

	for _, f := range []string{VmlinuzName, InitramfsName, MachinedName, EtcdName} {
		os.WriteFile(filepath.Join(dir, f), []byte(f), 0o644)
	}

	metal := []string{"--vmlinuz", filepath.Join(dir, VmlinuzName), "--initramfs", filepath.Join(dir, InitramfsName)}
	process := []string{"--machined", filepath.Join(dir, MachinedName), "--etcd", filepath.Join(dir, EtcdName)}

	for _, tc := range []struct {
		name, yaml string
		files      []string
		want       string
	}{
		{"system extensions", "customization:\n  systemExtensions:\n    officialExtensions: [siderolabs/gvisor]\n", metal, "customization.systemExtensions"},
		{"overlay", "overlay:\n  image: x\n  name: y\ncustomization: {}\n", metal, "overlay"},
		{"secureboot", "customization:\n  secureboot:\n    includeWellKnownCertificates: true\n", metal, "customization.secureboot"},
		{"kernel arguments of a process image", "customization:\n  extraKernelArgs: [a=1]\n", process, "extraKernelArgs is for metal images"},
		{"two arguments in one", "customization:\n  extraKernelArgs: [a=1 b=2]\n", metal, "not one kernel argument"},
		{"a misspelt field", "customization:\n  extraKernelArg: [a=1]\n", metal, "field extraKernelArg not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sch := filepath.Join(t.TempDir(), "s.yaml")
			os.WriteFile(sch, []byte(tc.yaml), 0o644)

			img := filepath.Join(t.TempDir(), "x.img")
			args := append([]string{"build", "--key", filepath.Join(dir, "k.key"), "--version", "v1.2.3", "--schematic", sch, "--out", img}, tc.files...)

			if err := Main(args, io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one saying %q", err, tc.want)
			}

			if _, err := os.Stat(img); err == nil {
				t.Errorf("a refused build left %s", img)
			}
		})
	}

	// A process node's image may carry META values.
	sch := filepath.Join(dir, "meta.yaml")
	os.WriteFile(sch, []byte("customization:\n  meta: [{key: 10, value: x}]\n"), 0o644)

	if err := Main(append([]string{"build", "--key", filepath.Join(dir, "k.key"), "--version", "v1.2.3", "--schematic", sch, "--out", filepath.Join(dir, "p.img")}, process...), io.Discard); err != nil {
		t.Errorf("a process image with META values: %v", err)
	}
}
