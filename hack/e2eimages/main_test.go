package main

import (
	"archive/tar"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/talos-go/talos/internal/registry"
)

// build then push: two images sharing a base folder land in a registry with TLS and basic auth
// under the registry's host and their own repository and tag; pulled back, the config has the
// entrypoint and user, the base is one layer (the same digest in both), and a setuid file, a
// symlink and the sticky /tmp keep their modes.
func TestBuildAndPush(t *testing.T) {
	dir := t.TempDir()
	base, root := filepath.Join(dir, "base"), filepath.Join(dir, "root")

	for _, d := range []string{filepath.Join(base, "bin"), filepath.Join(base, "tmp"), filepath.Join(root, "usr/local/bin")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}

	write(t, filepath.Join(base, "bin/busybox"), "busybox", 0o755)
	write(t, filepath.Join(root, "usr/local/bin/nnp"), "nnp", 0o755)

	// After the writes: the umask must not clear setuid and sticky.
	for p, m := range map[string]os.FileMode{filepath.Join(root, "usr/local/bin/nnp"): 0o755 | os.ModeSetuid, filepath.Join(base, "tmp"): 0o777 | os.ModeSticky} {
		if err := os.Chmod(p, m); err != nil {
			t.Fatal(err)
		}
	}

	if err := os.Symlink("/bin/busybox", filepath.Join(base, "bin/sh")); err != nil {
		t.Fatal(err)
	}

	specs := []spec{
		{Ref: "registry.k8s.io/e2e-test-images/nonewprivs:1.3", Base: base, Root: root, Cmd: []string{"nnp"}},
		{Ref: "registry.k8s.io/e2e-test-images/nonroot:1.4", Root: base, Cmd: []string{"sh"}, User: "1234"},
	}

	specFile, archive := filepath.Join(dir, "spec.json"), filepath.Join(dir, "images.tar")

	data, err := json.Marshal(specs)
	if err != nil {
		t.Fatal(err)
	}

	write(t, specFile, string(data), 0o644)

	var out bytes.Buffer
	if err = run(t.Context(), []string{"build", "-spec", specFile, "-out", archive}, &out); err != nil {
		t.Fatal(err)
	}

	if !strings.Contains(out.String(), "registry.k8s.io/e2e-test-images/nonroot:1.4\t") {
		t.Fatalf("build printed %q, want each image's size", out.String())
	}

	caPEM, crtPEM, keyPEM, err := registry.ServerCert("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}

	cert, err := tls.X509KeyPair(crtPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}

	r, err := registry.Start(registry.Options{Addr: "127.0.0.1:0", Cert: &cert, Users: map[string]string{"talos": "secret"}})
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { r.Close() })

	caFile, usersFile := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "users.json")
	write(t, caFile, string(caPEM), 0o600)
	write(t, usersFile, `{"talos": "secret"}`, 0o600)

	if err = run(t.Context(), []string{"push", "-archive", archive, "-registry", r.Host, "-ca", caFile, "-users", usersFile}, &out); err != nil {
		t.Fatal(err)
	}

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)

	pull := func(repo string) ([]string, map[string]int64, []string) {
		ref, err := name.ParseReference(r.Host + "/" + repo)
		if err != nil {
			t.Fatal(err)
		}

		img, err := remote.Image(ref, remote.WithContext(t.Context()), remote.WithAuth(&authn.Basic{Username: "talos", Password: "secret"}),
			remote.WithTransport(&http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}))
		if err != nil {
			t.Fatalf("%s: %v", repo, err)
		}

		cfg, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}

		layers, err := img.Layers()
		if err != nil {
			t.Fatal(err)
		}

		modes, links := map[string]int64{}, []string{}

		var digests []string

		for _, l := range layers {
			d, _ := l.DiffID()
			digests = append(digests, d.String())

			rc, err := l.Uncompressed()
			if err != nil {
				t.Fatal(err)
			}

			tr := tar.NewReader(rc)

			for {
				hdr, err := tr.Next()
				if errors.Is(err, io.EOF) {
					break
				}

				if err != nil {
					t.Fatal(err)
				}

				modes[hdr.Name] = hdr.Mode
				if hdr.Typeflag == tar.TypeSymlink {
					links = append(links, hdr.Name+"->"+hdr.Linkname)
				}
			}

			rc.Close()
		}

		return append([]string{strings.Join(cfg.Config.Cmd, " "), cfg.Config.User}, digests...), modes, links
	}

	nnp, modes, _ := pull("e2e-test-images/nonewprivs:1.3")
	if len(nnp) != 4 || nnp[0] != "nnp" || nnp[1] != "" {
		t.Fatalf("nonewprivs: cmd, user and layers %q, want nnp, root, two layers", nnp)
	}

	if modes["usr/local/bin/nnp"] != 0o4755 {
		t.Fatalf("nnp's mode %o, want 4755 (setuid)", modes["usr/local/bin/nnp"])
	}

	nonroot, modes, links := pull("e2e-test-images/nonroot:1.4")
	if len(nonroot) != 3 || nonroot[0] != "sh" || nonroot[1] != "1234" {
		t.Fatalf("nonroot: cmd, user and layers %q, want sh, 1234, one layer", nonroot)
	}

	if nonroot[2] != nnp[2] {
		t.Fatalf("the shared folder made layers %s and %s, want one", nonroot[2], nnp[2])
	}

	if modes["tmp/"] != 0o1777 || len(links) != 1 || links[0] != "bin/sh->/bin/busybox" {
		t.Fatalf("/tmp's mode %o, symlinks %q: want 1777 and bin/sh->/bin/busybox", modes["tmp/"], links)
	}
}

func write(t *testing.T, p, data string, mode os.FileMode) {
	t.Helper()

	if err := os.WriteFile(p, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
}
