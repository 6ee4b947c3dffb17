// Package provisiontest holds what the provisioners' tests share.
package provisiontest

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/talos-go/talos/internal/provision"
)

// AssertRefused runs provision.Create with req while the provisioner's geteuid (swapped for the
// test) answers euid, and checks that it fails saying every one of want, and makes nothing.
func AssertRefused(t *testing.T, geteuid *func() int, req provision.Request, euid int, want ...string) {
	t.Helper()

	orig := *geteuid
	*geteuid = func() int { return euid }

	t.Cleanup(func() { *geteuid = orig })

	req.StateRoot = t.TempDir()

	_, _, err := provision.Create(context.Background(), req)
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
