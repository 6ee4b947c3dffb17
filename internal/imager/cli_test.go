package imager

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
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
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/talos-go/talos/internal/testenv"
)

func TestParseArgs(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want Options // Command "" for a refusal
		err  string
	}{
		{[]string{"keygen"}, Options{Command: "keygen", Out: "."}, ""},
		{[]string{"build", "--key", "k", "--version", "v1", "--machined", "m", "--etcd", "e", "--out", "o", "--gzip=false"},
			Options{Command: "build", Key: "k", Version: "v1", Machined: "m", Etcd: "e", Out: "o"}, ""},
		{[]string{"build", "--key", "k"}, Options{}, "build needs --key, --version"},
		{[]string{"verify", "--pub", "p", "img"}, Options{Command: "verify", Pub: "p", Image: "img"}, ""},
		{[]string{"verify", "img"}, Options{}, "verify needs --pub"},
		{[]string{"pubkey", "k.pub"}, Options{Command: "pubkey", Pub: "k.pub"}, ""},
		{[]string{"pubkey"}, Options{}, "usage: imager pubkey"},
		{[]string{"frobnicate"}, Options{}, "usage: imager keygen"},
		{nil, Options{}, "usage: imager keygen"},
	} {
		got, err := parseArgs(tc.args)

		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%v: error %v, want one saying %q", tc.args, err, tc.err)
			}

			continue
		}

		if err != nil || got != tc.want {
			t.Errorf("%v: got %+v, %v; want %+v", tc.args, got, err, tc.want)
		}
	}
}

// `imager installer --out` wraps a signed image as an installer image (the archive a push would
// send): its config names the format, the version and the image's architecture, and its one
// layer holds the image unchanged. An image not signed by --pub is refused.
func TestInstallerCommand(t *testing.T) {
	dir := t.TempDir()

	if _, err := GenerateKey(filepath.Join(dir, "k.key"), filepath.Join(dir, "k.pub")); err != nil {
		t.Fatal(err)
	}

	if _, err := GenerateKey(filepath.Join(dir, "o.key"), filepath.Join(dir, "o.pub")); err != nil {
		t.Fatal(err)
	}

	priv, _ := LoadPrivateKey(filepath.Join(dir, "k.key"))

	for _, f := range []string{MachinedName, EtcdName} {
		os.WriteFile(filepath.Join(dir, f), []byte(f), 0o755)
	}

	img := filepath.Join(dir, "talos.img")
	if _, err := BuildFile(img, BuildOptions{Version: "v1.2.3", Arch: "amd64", Key: priv, Compress: true,
		Files: map[string]string{MachinedName: filepath.Join(dir, MachinedName), EtcdName: filepath.Join(dir, EtcdName)}}); err != nil {
		t.Fatal(err)
	}

	out := filepath.Join(dir, "installer.tar")

	var stdout strings.Builder
	if err := Main([]string{"installer", "--image", img, "--pub", filepath.Join(dir, "k.pub"), "--out", out}, &stdout); err != nil {
		t.Fatal(err)
	}

	if !strings.Contains(stdout.String(), "version v1.2.3, linux/amd64") {
		t.Fatalf("output %q", stdout.String())
	}

	oci, err := tarball.ImageFromPath(out, nil)
	if err != nil {
		t.Fatal(err)
	}

	cf, err := oci.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}

	if v, err := CheckInstallerConfig(cf, "amd64"); err != nil || v != "v1.2.3" {
		t.Fatalf("config: version %q, %v", v, err)
	}

	if _, err = CheckInstallerConfig(cf, "arm64"); err == nil || !strings.Contains(err.Error(), "is for linux/amd64 and this node is linux/arm64") {
		t.Fatalf("an amd64 installer on an arm64 node: %v", err)
	}

	layers, err := oci.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%d layers, %v", len(layers), err)
	}

	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()

	payload, err := InstallerPayload(rc)
	if err != nil {
		t.Fatal(err)
	}

	got, _ := io.ReadAll(payload)
	if want, _ := os.ReadFile(img); !bytes.Equal(got, want) {
		t.Fatalf("the layer's image differs from the signed image (%d bytes, want %d)", len(got), len(want))
	}

	err = Main([]string{"installer", "--image", img, "--pub", filepath.Join(dir, "o.pub"), "--out", filepath.Join(dir, "x.tar")}, io.Discard)
	if !errors.Is(err, ErrRefused) {
		t.Fatalf("an image signed by another key: %v", err)
	}
}

// `imager installer --push` pushes to a registry behind TLS and basic auth; a wrong password is
// refused by the registry.
func TestInstallerPush(t *testing.T) {
	dir := t.TempDir()

	reg, caPEM := testenv.StartRegistry(t, "127.0.0.1", map[string]string{"u": "pw"})

	var err error

	if _, err = GenerateKey(filepath.Join(dir, "k.key"), filepath.Join(dir, "k.pub")); err != nil {
		t.Fatal(err)
	}

	priv, _ := LoadPrivateKey(filepath.Join(dir, "k.key"))

	for _, f := range []string{VmlinuzName, InitramfsName} {
		os.WriteFile(filepath.Join(dir, f), []byte(f), 0o644)
	}

	img := filepath.Join(dir, "metal.img")
	if _, err = BuildFile(img, BuildOptions{Version: "v1.2.3", Key: priv,
		Files: map[string]string{VmlinuzName: filepath.Join(dir, VmlinuzName), InitramfsName: filepath.Join(dir, InitramfsName)}}); err != nil {
		t.Fatal(err)
	}

	os.WriteFile(filepath.Join(dir, "ca.crt"), caPEM, 0o644)
	os.WriteFile(filepath.Join(dir, "pass"), []byte("pw\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "bad"), []byte("nope\n"), 0o600)

	ref := reg.Host + "/talos/installer:v1.2.3"
	args := func(pass string) []string {
		return []string{"installer", "--image", img, "--pub", filepath.Join(dir, "k.pub"), "--push", ref,
			"--ca", filepath.Join(dir, "ca.crt"), "--username", "u", "--password-file", filepath.Join(dir, pass)}
	}

	var stdout strings.Builder
	if err = Main(args("pass"), &stdout); err != nil {
		t.Fatal(err)
	}

	_, pin, _ := strings.Cut(stdout.String(), "pinned: ")

	pushed, err := name.NewDigest(strings.TrimSpace(pin))
	if err != nil {
		t.Fatalf("output %q names no reference: %v", stdout.String(), err)
	}

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)

	got, err := remote.Image(pushed, remote.WithAuth(&authn.Basic{Username: "u", Password: "pw"}),
		remote.WithTransport(&http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}))
	if err != nil {
		t.Fatalf("pulling back %s: %v", pushed, err)
	}

	cf, err := got.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}

	if v, err := CheckInstallerConfig(cf, cf.Architecture); err != nil || v != "v1.2.3" {
		t.Fatalf("pushed config: version %q, %v", v, err)
	}

	if err = Main(args("bad"), io.Discard); err == nil || !strings.Contains(err.Error(), `refused the credentials of user "u"`) {
		t.Fatalf("push with a wrong password: %v", err)
	}
}
