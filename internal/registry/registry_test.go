package registry_test

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/talos-go/talos/internal/registry"
)

// A registry with TLS and basic auth: a push with the password lands, a pull gives back the
// same image; a wrong password and no password are refused with 401 saying why.
func TestPushPullWithAuth(t *testing.T) {
	caPEM, crtPEM, keyPEM, err := registry.ServerCert("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}

	cert, err := tls.X509KeyPair(crtPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}

	r, err := registry.Start(registry.Options{Addr: "127.0.0.1:0", Cert: &cert, Users: map[string]string{"u": "secret"}, BlobDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { r.Close() })

	img, err := registry.Image(map[string][]byte{"bin/hello": []byte("#!/bin/true\n")}, "/bin/hello")
	if err != nil {
		t.Fatal(err)
	}

	ref := r.Host + "/probe/hello:v1"

	bad := registry.Client{Username: "u", Password: "wrong", CA: caPEM}
	if err = bad.Push(t.Context(), ref, img); err == nil || !strings.Contains(err.Error(), "401 Unauthorized") {
		t.Fatalf("push with a wrong password: %v", err)
	}

	good := registry.Client{Username: "u", Password: "secret", CA: caPEM}
	if err = good.Push(t.Context(), ref, img); err != nil {
		t.Fatal(err)
	}

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)

	transport := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}

	parsed, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}

	pulled, err := remote.Image(parsed, remote.WithContext(t.Context()), remote.WithTransport(transport),
		remote.WithAuth(&authn.Basic{Username: "u", Password: "secret"}))
	if err != nil {
		t.Fatal(err)
	}

	want, _ := img.Digest()
	if got, err := pulled.Digest(); err != nil || got != want {
		t.Fatalf("pulled %v (%v), pushed %v", got, err, want)
	}

	cfg, err := pulled.ConfigFile()
	if err != nil || len(cfg.Config.Entrypoint) != 1 || cfg.Config.Entrypoint[0] != "/bin/hello" {
		t.Fatalf("entrypoint %v (%v)", cfg, err)
	}

	// No credentials: the challenge that makes clients send theirs.
	resp, err := (&http.Client{Transport: transport}).Get(r.URL + "/v2/")
	if err != nil {
		t.Fatal(err)
	}

	resp.Body.Close()

	if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Basic ") {
		t.Fatalf("anonymous /v2/: %s, challenge %q", resp.Status, resp.Header.Get("WWW-Authenticate"))
	}

	// A wrong password: the body says so (a GET has one).
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, r.URL+"/v2/", nil)
	req.SetBasicAuth("u", "wrong")

	if resp, err = (&http.Client{Transport: transport}).Do(req); err != nil {
		t.Fatal(err)
	}

	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()

	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(body), "invalid username or password") {
		t.Fatalf("wrong password on /v2/: %s %s", resp.Status, body)
	}

	// The CA is needed: a client trusting only the system's roots refuses the registry.
	if err = (registry.Client{Username: "u", Password: "secret"}).Push(t.Context(), ref, img); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("push without the CA: %v", err)
	}
}
