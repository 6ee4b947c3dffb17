package upgrade

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	configmachine "github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"

	"github.com/talos-go/talos/internal/imager"
	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	"github.com/talos-go/talos/internal/registry"
	"github.com/talos-go/talos/internal/slots"
	"github.com/talos-go/talos/internal/testenv"
)

// installerRegistry is a real registry on loopback behind TLS and basic auth holding installer
// images: talos/installer:v2 (signed by keys), :arm64 (another architecture), :foreign (signed
// by another key) and talos/plain:v1 (an ordinary image).
type installerRegistry struct {
	reg    *registry.Registry
	ca     []byte
	keys   []ed25519.PublicKey
	digest string // talos/installer:v2's
	plain  string // talos/plain:v1's digest
}

func startInstallerRegistry(t *testing.T) *installerRegistry {
	t.Helper()

	ctx := context.Background()
	dir := t.TempDir()

	reg, caPEM := testenv.StartRegistry(t, "127.0.0.1", map[string]string{"u": "pw"})

	r := &installerRegistry{reg: reg, ca: caPEM}
	client := registry.Client{Username: "u", Password: "pw", CA: caPEM}

	for _, f := range []string{"machined", "etcd"} {
		os.WriteFile(filepath.Join(dir, f), []byte("new "+f), 0o755)
	}

	var err error

	for _, tc := range []struct{ tag, arch, key string }{
		{"v2", "amd64", "k"}, {"arm64", "arm64", "k"}, {"foreign", "amd64", "other"},
	} {
		keyFile := filepath.Join(dir, tc.key+".key")
		if _, err = os.Stat(keyFile); err != nil {
			if _, err = imager.GenerateKey(keyFile, filepath.Join(dir, tc.key+".pub")); err != nil {
				t.Fatal(err)
			}
		}

		priv, _ := imager.LoadPrivateKey(keyFile)
		keys, _ := imager.LoadPublicKeys(filepath.Join(dir, tc.key+".pub"))
		imgFile := filepath.Join(dir, tc.tag+".img")

		if _, err = imager.BuildFile(imgFile, imager.BuildOptions{Version: "v2.0.0", Arch: tc.arch, Key: priv, Compress: true,
			Files: map[string]string{"machined": filepath.Join(dir, "machined"), "etcd": filepath.Join(dir, "etcd")}}); err != nil {
			t.Fatal(err)
		}

		img, man, err := imager.InstallerImage(imgFile, keys)
		if err != nil || man.Arch != tc.arch {
			t.Fatalf("installer image %s: %v (manifest %+v)", tc.tag, err, man)
		}

		if err = client.Push(ctx, reg.Host+"/talos/installer:"+tc.tag, img); err != nil {
			t.Fatal(err)
		}

		if tc.tag == "v2" {
			r.keys = keys
			d, _ := img.Digest()
			r.digest = d.String()
		}
	}

	plain, err := registry.Image(map[string][]byte{"/bin/true": []byte("x")}, "/bin/true")
	if err != nil {
		t.Fatal(err)
	}

	if err = client.Push(ctx, reg.Host+"/talos/plain:v1", plain); err != nil {
		t.Fatal(err)
	}

	d, _ := plain.Digest()
	r.plain = d.String()

	return r
}

// registries is machine.registries for the test: installer.e2e.test is mirrored to the registry
// (which the node reaches with its CA and the password given), down.e2e.test to a closed port
// and nothing else.
func (r *installerRegistry) registries(password string) *v1alpha1.RegistriesConfig {
	return &v1alpha1.RegistriesConfig{
		RegistryMirrors: map[string]*v1alpha1.RegistryMirrorConfig{
			"installer.e2e.test": {MirrorEndpoints: []string{r.reg.URL}, MirrorSkipFallback: new(true)},
			"down.e2e.test":      {MirrorEndpoints: []string{"https://127.0.0.1:1"}, MirrorSkipFallback: new(true)},
		},
		RegistryConfig: map[string]*v1alpha1.RegistryConfig{
			r.reg.Host: {
				RegistryTLS:  &v1alpha1.RegistryTLSConfig{TLSCA: v1alpha1.Base64Bytes(r.ca)},
				RegistryAuth: &v1alpha1.RegistryAuthConfig{RegistryUsername: "u", RegistryPassword: password},
			},
		},
	}
}

// An upgrade's installer image comes through machine.registries (mirror, CA, basic auth) and is
// unpacked as a signed image; every refusal names its cause and leaves nothing behind.
func TestPullInstaller(t *testing.T) {
	r := startInstallerRegistry(t)
	ctx := context.Background()

	pull := func(t *testing.T, password, ref string) (*imager.Manifest, string, error) {
		t.Helper()

		dest := filepath.Join(t.TempDir(), ".staging-B")
		man, err := pullInstaller(ctx, pullSource{regs: r.registries(password), hostsDir: t.TempDir()}, ref, r.keys, dest)

		if _, serr := os.Stat(dest); err != nil && serr == nil {
			t.Errorf("%s: the refused pull left %s behind", ref, dest)
		}

		return man, dest, err
	}

	for _, ref := range []string{"installer.e2e.test/talos/installer:v2", "installer.e2e.test/talos/installer@" + r.digest} {
		man, dest, err := pull(t, "pw", ref)
		if err != nil {
			t.Fatalf("%s: %v", ref, err)
		}

		if data, _ := os.ReadFile(filepath.Join(dest, "machined")); man.Version != "v2.0.0" || string(data) != "new machined" {
			t.Fatalf("%s: version %s, machined %q", ref, man.Version, data)
		}
	}

	for _, tc := range []struct {
		name, password, ref string
		want                []string
	}{
		{"wrong password", "bad", "installer.e2e.test/talos/installer:v2", []string{r.reg.Host + " refused the credentials", "machine.registries.config.\"" + r.reg.Host + "\".auth"}},
		{"unreachable", "pw", "down.e2e.test/talos/installer:v2", []string{"registry unreachable", "127.0.0.1:1"}},
		{"missing", "pw", "installer.e2e.test/talos/installer:v9", []string{"not found", r.reg.Host}},
		{"not an installer", "pw", "installer.e2e.test/talos/plain:v1", []string{"not an installer image", imager.InstallerLabel}},
		{"wrong architecture", "pw", "installer.e2e.test/talos/installer:arm64", []string{"image refused", "linux/arm64", "this node is linux/amd64"}},
		{"other key", "pw", "installer.e2e.test/talos/installer:foreign", []string{"image refused", "key"}},
		// A digest the repository does not hold: no tag stands in for it.
		{"digest pin", "pw", "installer.e2e.test/talos/installer@" + r.plain, []string{"not found"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := pull(t, tc.password, tc.ref)
			if err == nil {
				t.Fatal("pulled")
			}

			t.Log(err)

			if slices.Contains(tc.want, "not found") != errors.Is(err, os.ErrNotExist) {
				t.Errorf("errors.Is(err, os.ErrNotExist) = %v: only a missing image is NotFound", errors.Is(err, os.ErrNotExist))
			}

			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// A mirror that answers a digest reference with another manifest is refused: the digest pins
// the content, wherever it comes from.
func TestPullInstallerDigestPinnedAgainstALyingMirror(t *testing.T) {
	r := startInstallerRegistry(t)

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(r.ca)

	target, _ := url.Parse(r.reg.URL)
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}

	// Every manifest request by digest gets talos/installer:v2's manifest.
	byDigest := regexp.MustCompile(`/manifests/sha256:[0-9a-f]{64}$`)
	lying := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		req.URL.Path = byDigest.ReplaceAllString(req.URL.Path, "/manifests/v2")
		proxy.ServeHTTP(w, req)
	}))
	t.Cleanup(lying.Close)

	regs := r.registries("pw")
	regs.RegistryMirrors["lying.e2e.test"] = &v1alpha1.RegistryMirrorConfig{MirrorEndpoints: []string{lying.URL}, MirrorSkipFallback: new(true)}
	regs.RegistryConfig[strings.TrimPrefix(lying.URL, "http://")] = &v1alpha1.RegistryConfig{
		RegistryAuth: &v1alpha1.RegistryAuthConfig{RegistryUsername: "u", RegistryPassword: "pw"},
	}

	src := pullSource{regs: regs, hostsDir: t.TempDir()}
	dest := filepath.Join(t.TempDir(), ".staging-B")

	// The honest answer passes through the proxy.
	if _, err := pullInstaller(context.Background(), src, "lying.e2e.test/talos/installer@"+r.digest, r.keys, dest); err != nil {
		t.Fatalf("through the proxy: %v", err)
	}

	os.RemoveAll(dest)

	_, err := pullInstaller(context.Background(), src, "lying.e2e.test/talos/installer@"+r.plain, r.keys, dest)
	if err == nil || !errors.Is(err, imager.ErrRefused) || !strings.Contains(err.Error(), "does not match") {
		t.Fatalf("a manifest that is not the pinned digest: %v", err)
	}

	if _, serr := os.Stat(dest); serr == nil {
		t.Fatal("the refused pull left the staging folder behind")
	}
}

// Upgrade takes a reference as --image, and a failed pull changes nothing.
func TestUpgradeFromUnreachableRegistry(t *testing.T) {
	e := newEnv(t, false)

	_, err := e.m.Upgrade(context.Background(), &machine.UpgradeRequest{Image: "127.0.0.1:1/talos/installer:v2"}, "actor")
	if err == nil || !strings.Contains(err.Error(), "upgrade refused, nothing was changed") || !strings.Contains(err.Error(), "registry unreachable") {
		t.Fatalf("upgrade from a closed port: %v", err)
	}

	if e.m.slotInstalled(slots.B) {
		t.Fatal("a refused upgrade installed slot B")
	}

	if _, err = os.Stat(filepath.Join(e.m.R.Paths.Boot(), ".staging-B")); err == nil {
		t.Fatal("a refused upgrade left its staging folder")
	}
}

func TestIsImageReference(t *testing.T) {
	for s, want := range map[string]bool{
		"registry.local/talos/installer:v1": true,
		"10.5.0.1:5000/installer@sha256:00": true,
		"localhost/installer:v1":            true,
		"/abs/talos.img":                    false,
		"https://host/talos.img":            false,
		"talos.img":                         false,
		"talos/installer:v1":                false, // no registry host: a node has no default registry
	} {
		if got := isImageReference(s); got != want {
			t.Errorf("isImageReference(%q) = %v, want %v", s, got, want)
		}
	}
}

// A metal node upgrades from an installer image in a registry its config names (CA and basic
// auth in machine.registries): slot B gets the image's kernel and initramfs, GRUB boots it next.
func TestMetalUpgradeFromInstallerImage(t *testing.T) {
	e, srv := metalEnv(t)
	r := startInstallerRegistry(t)
	ctx := context.Background()

	resp, err := http.Get(srv + "/metal.img")
	if err != nil {
		t.Fatal(err)
	}

	metalImg := filepath.Join(t.TempDir(), "metal.img")
	f, _ := os.Create(metalImg)
	_, err = io.Copy(f, resp.Body)
	resp.Body.Close()
	f.Close()

	if err != nil {
		t.Fatal(err)
	}

	keys, err := e.m.TrustedKeys()
	if err != nil {
		t.Fatal(err)
	}

	img, _, err := imager.InstallerImage(metalImg, keys)
	if err != nil {
		t.Fatal(err)
	}

	if err = (registry.Client{Username: "u", Password: "pw", CA: r.ca}).Push(ctx, r.reg.Host+"/talos/metal:v2.0.0", img); err != nil {
		t.Fatal(err)
	}

	e.m.R.SetConfig(ctest.MachineConfig(t, configmachine.TypeWorker, func(c *v1alpha1.Config) {
		c.MachineConfig.MachineRegistries = *r.registries("pw")
	}).Provider())

	if _, err = e.m.Upgrade(ctx, &machine.UpgradeRequest{Image: r.reg.Host + "/talos/metal:v2.0.0"}, "actor"); err != nil {
		t.Fatal(err)
	}

	<-e.rec.done

	if data, _ := os.ReadFile(filepath.Join(e.m.R.Paths.Boot(), "B", slots.SlotInitramfs)); string(data) != "new initramfs" {
		t.Fatalf("slot B's initramfs: %q", data)
	}

	if grubDefault(t, e) != slots.B {
		t.Fatalf("GRUB boots %s after the upgrade", grubDefault(t, e))
	}
}
