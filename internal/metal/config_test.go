package metal

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestConfigURL(t *testing.T) {
	vars := map[string]string{"uuid": "4c4c4544-0042", "mac": "52:54:00:12:34:56", "hostname": "metal 1"}

	for arg, want := range map[string]string{
		"http://10.0.2.2:8080/config.yaml":             "http://10.0.2.2:8080/config.yaml",
		"https://cfg.example/${uuid}.yaml":             "https://cfg.example/4c4c4544-0042.yaml",
		"http://cfg.example/?mac=${mac}&h=${hostname}": "http://cfg.example/?mac=52%3A54%3A00%3A12%3A34%3A56&h=metal+1",
		"https://cfg.example/${serial}.yaml":           "error: ${serial} is unknown or has no value here",
		"metal-iso":                                    "error: a config from a volume is not supported yet",
		"ftp://cfg.example/config.yaml":                "error: not an http(s) URL",
		"/config.yaml":                                 "error: not an http(s) URL",
	} {
		got, err := ConfigURL(arg, vars)
		if err != nil {
			got = "error: " + err.Error()
		}

		if !strings.Contains(got, strings.TrimPrefix(want, "error: ")) || strings.HasPrefix(want, "error: ") != (err != nil) {
			t.Errorf("ConfigURL(%q) = %q, want %q", arg, got, want)
		}
	}
}

// The server fails the first try: FetchConfig tries again and writes the config, 0600.
func TestFetchConfigRetries(t *testing.T) {
	var tries atomic.Int32

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if tries.Add(1) == 1 {
			http.Error(w, "not yet", http.StatusServiceUnavailable)

			return
		}

		w.Write([]byte("version: v1alpha1\n"))
	}))
	defer srv.Close()

	dst := filepath.Join(t.TempDir(), "config.yaml")
	if err := FetchConfig(context.Background(), srv.URL+"/config.yaml", dst); err != nil {
		t.Fatal(err)
	}

	b, err := os.ReadFile(dst)
	if err != nil || string(b) != "version: v1alpha1\n" {
		t.Fatalf("config: %q, %v", b, err)
	}

	if st, _ := os.Stat(dst); st.Mode().Perm() != 0o600 {
		t.Errorf("config mode %v, want 0600", st.Mode().Perm())
	}

	if n := tries.Load(); n != 2 {
		t.Errorf("%d tries, want 2", n)
	}
}

// The end of the boot's wait ends the retries with the last error, naming the URL.
func TestFetchConfigGivesUp(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()

	err := FetchConfig(ctx, srv.URL+"/missing.yaml", filepath.Join(t.TempDir(), "config.yaml"))
	if err == nil || !strings.Contains(err.Error(), "404") || !strings.Contains(err.Error(), "missing.yaml") {
		t.Fatalf("error %v, want the URL's 404", err)
	}
}
