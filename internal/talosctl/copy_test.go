package talosctl

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type entry struct {
	name, body, link string
	dir              bool
}

func archive(t *testing.T, entries ...entry) *bytes.Buffer {
	t.Helper()

	var buf bytes.Buffer

	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)

	for _, e := range entries {
		hdr := &tar.Header{Name: e.name, Mode: 0o644, Typeflag: tar.TypeReg, Size: int64(len(e.body))}

		switch {
		case e.dir:
			hdr.Typeflag, hdr.Mode, hdr.Size = tar.TypeDir, 0o755, 0
		case e.link != "":
			hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeSymlink, e.link, 0
		}

		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}

		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}

	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}

	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}

	return &buf
}

func TestExtractTarGz(t *testing.T) {
	dest := filepath.Join(t.TempDir(), "out")

	err := extractTarGz(archive(t,
		entry{name: "log/", dir: true},
		entry{name: "log/a.log", body: "hello"},
		entry{name: "log/sub/b.log", body: "world"},
		entry{name: "log/current", link: "a.log"},
	), dest)
	if err != nil {
		t.Fatal(err)
	}

	for name, want := range map[string]string{"log/a.log": "hello", "log/sub/b.log": "world", "log/current": "hello"} {
		got, err := os.ReadFile(filepath.Join(dest, name))
		if err != nil || string(got) != want {
			t.Fatalf("%s: %q %v", name, got, err)
		}
	}
}

func TestExtractTarGzRefusesEscapes(t *testing.T) {
	outside := t.TempDir()

	for name, entries := range map[string][]entry{
		"parent":          {{name: "../evil", body: "x"}},
		"absolute":        {{name: "/tmp/evil", body: "x"}},
		"through symlink": {{name: "link", link: outside}, {name: "link/evil", body: "x"}},
		"below a symlink": {{name: "link", link: outside}, {name: "link/a/b/evil", body: "x"}},
		"onto a symlink":  {{name: "target", link: filepath.Join(outside, "evil")}, {name: "target", body: "x"}},
		"folder via link": {{name: "d", link: outside}, {name: "d/", dir: true}, {name: "d/evil", body: "x"}},
	} {
		t.Run(name, func(t *testing.T) {
			err := extractTarGz(archive(t, entries...), filepath.Join(t.TempDir(), "out"))
			if err == nil {
				t.Fatal("an escaping archive was extracted")
			}

			if _, statErr := os.Lstat(filepath.Join(outside, "evil")); statErr == nil {
				t.Fatal("a file was written outside the destination")
			}

			if name != "onto a symlink" && !strings.Contains(err.Error(), "outside the destination") {
				t.Fatalf("error does not say why: %v", err)
			}
		})
	}
}
