package hostname

import (
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	for _, ok := range []string{"", "talos", "ip-10-0-0-10.ec2.internal", "node-1.c.my-project.internal."} {
		if err := Check(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}

	for name, want := range map[string]string{
		"a b":                     `' ' is not a letter, digit or hyphen`,
		"a..b":                    `its label "" is empty`,
		"-a":                      `its label "-a" is empty, longer than 63 characters or begins or ends`,
		strings.Repeat("a", 64):   "longer than 63",
		strings.Repeat("a.", 127): "longer than 253 characters",
	} {
		if err := Check(name); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", name, err, want)
		}
	}
}
