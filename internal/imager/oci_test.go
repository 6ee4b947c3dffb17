package imager

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func TestWriteImageArchive(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "pause")

	if err := os.WriteFile(bin, []byte("#!binary"), 0o755); err != nil {
		t.Fatal(err)
	}

	spec := ImageSpec{
		Ref:        "registry.k8s.io/pause:3.10",
		Files:      []ImageFile{{Path: "/usr/bin/pause", Source: bin}, {Path: "/pause", Link: "usr/bin/pause"}},
		Entrypoint: []string{"/pause"},
	}

	a, b := filepath.Join(dir, "a.tar"), filepath.Join(dir, "b.tar")
	for _, out := range []string{a, b} {
		if err := WriteImageArchive(out, spec); err != nil {
			t.Fatal(err)
		}
	}

	da, _ := os.ReadFile(a)
	db, _ := os.ReadFile(b)

	if !bytes.Equal(da, db) {
		t.Error("two writes of the same image differ")
	}

	img, err := tarball.ImageFromPath(a, nil)
	if err != nil {
		t.Fatal(err)
	}

	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}

	if len(cf.Config.Entrypoint) != 1 || cf.Config.Entrypoint[0] != "/pause" {
		t.Errorf("entrypoint = %v", cf.Config.Entrypoint)
	}

	layers, _ := img.Layers()
	if len(layers) != 1 {
		t.Fatalf("layers = %d, want 1", len(layers))
	}

	if err = WriteImageArchive(filepath.Join(dir, "c.tar"), ImageSpec{Ref: "x:1", Files: []ImageFile{{Path: "relative"}}}); err == nil {
		t.Error("a relative path in the image was accepted")
	}
}
