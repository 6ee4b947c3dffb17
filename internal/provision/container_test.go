package provision

import (
	"context"
	"net/netip"
	"os"
	"strings"
	"testing"
)

func TestGatewayAndLinkNames(t *testing.T) {
	if got := Gateway(netip.MustParsePrefix("10.5.0.0/24")); got.String() != "10.5.0.1/24" {
		t.Fatalf("gateway %s", got)
	}

	addrs, err := NodeAddresses(netip.MustParsePrefix("10.5.0.0/24"), 2)
	if err != nil || addrs[0].String() != "10.5.0.2" || addrs[1].String() != "10.5.0.3" {
		t.Fatalf("node addresses %v %v", addrs, err)
	}

	// Link names are at most 15 bytes and differ per cluster folder.
	a, b := "br-"+ShortHash("/a", 12), "br-"+ShortHash("/b", 12)
	if len(a) > 15 || a == b {
		t.Fatalf("bridge names %q %q", a, b)
	}
}

// assertRefused runs Create with req as the user euid and checks that it fails saying every
// one of want, and makes nothing.
func assertRefused(t *testing.T, req Request, euid int, want ...string) {
	t.Helper()

	orig := geteuid
	geteuid = func() int { return euid }

	t.Cleanup(func() { geteuid = orig })

	req.StateRoot = t.TempDir()

	_, _, err := Create(context.Background(), req)
	if err == nil {
		t.Fatal("create accepted the request")
	}

	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}

	if entries, _ := os.ReadDir(req.StateRoot); len(entries) != 0 {
		t.Errorf("the refused create left %v", entries)
	}
}
