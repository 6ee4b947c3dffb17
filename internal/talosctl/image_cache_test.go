package talosctl

import (
	"io"
	"log"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// TestImageCacheCreate pulls an image the test pushed to a registry it runs on loopback, and
// reads the cache's archive back: same config and layers.
func TestImageCacheCreate(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()

	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}

	img, err := random.Image(2048, 2)
	if err != nil {
		t.Fatal(err)
	}

	ref := u.Host + "/siderolabs/hello:v1"

	tag, err := name.NewTag(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}

	if err = remote.Write(tag, img); err != nil {
		t.Fatal(err)
	}

	dir := filepath.Join(t.TempDir(), "cache")
	layers := filepath.Join(t.TempDir(), "layers")

	code, _, stderr := run(t, "image", "cache-create", "--images", ref, "--image-cache-path", dir, "--image-layer-cache-path", layers, "--insecure")
	if code != 0 {
		t.Fatal(stderr)
	}

	archive := filepath.Join(dir, archiveName(ref))
	mustContain(t, stderr, ref+" -> "+archive)

	got, err := tarball.ImageFromPath(archive, &tag)
	if err != nil {
		t.Fatal(err)
	}

	wantConfig, _ := img.ConfigName()
	gotConfig, err := got.ConfigName()

	if err != nil || wantConfig != gotConfig {
		t.Errorf("config: pushed %s, cached %s (%v)", wantConfig, gotConfig, err)
	}

	wantLayers, _ := img.Layers()
	gotLayers, _ := got.Layers()

	if len(wantLayers) != len(gotLayers) {
		t.Fatalf("layers: pushed %d, cached %d", len(wantLayers), len(gotLayers))
	}

	for i := range wantLayers {
		a, _ := wantLayers[i].DiffID()
		b, _ := gotLayers[i].DiffID()

		if a != b {
			t.Errorf("layer %d: %s != %s", i, a, b)
		}
	}

	// A second run into the same folder needs --force; a missing image names itself.
	code, _, stderr = run(t, "image", "cache-create", "--images", ref, "--image-cache-path", dir, "--insecure")
	if code == 0 || !strings.Contains(stderr, "--force") {
		t.Errorf("non-empty cache without --force: code %d, %s", code, stderr)
	}

	missing := u.Host + "/siderolabs/absent:v1"

	code, _, stderr = run(t, "image", "cache-create", "--images", missing, "--image-cache-path", t.TempDir(), "--insecure")
	if code == 0 || !strings.Contains(stderr, missing) {
		t.Errorf("missing image: code %d, %s", code, stderr)
	}
}
