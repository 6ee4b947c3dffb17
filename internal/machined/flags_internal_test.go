package machined

import (
	"bytes"
	"flag"
	"strings"
	"testing"
	"time"
)

// TestCertLifetimeFlag: --cert-lifetime reaches the options, a negative one is refused naming
// the flag, and the usage text does not show it (only tests set it).
func TestCertLifetimeFlag(t *testing.T) {
	opts := Options{StateDir: t.TempDir(), Address: "127.0.0.1", Platform: "container", CertLifetime: -time.Second}
	if err := opts.check(); err == nil || !strings.Contains(err.Error(), "--cert-lifetime") {
		t.Fatalf("a negative lifetime: error %v, want one naming --cert-lifetime", err)
	}

	var out bytes.Buffer

	fs := flag.NewFlagSet("machined", flag.ContinueOnError)
	fs.SetOutput(&out)
	fs.String("state", "", "state folder")
	lifetime := fs.Duration(certLifetimeFlag, 0, "lifetime of the node's certificates")

	if err := fs.Parse([]string{"--" + certLifetimeFlag, "6s"}); err != nil || *lifetime != 6*time.Second {
		t.Fatalf("parsed %v, %v; want 6s", *lifetime, err)
	}

	usage(fs, certLifetimeFlag)

	if got := out.String(); !strings.Contains(got, "-state") || strings.Contains(got, certLifetimeFlag) {
		t.Errorf("usage shows the state flag and hides %s; got:\n%s", certLifetimeFlag, got)
	}
}
