package container

import "testing"

// TestResolvConf: the node's resolv.conf lists the config's nameservers, or upstream's
// defaults when it names none (CoreDNS will not start without a resolver).
func TestResolvConf(t *testing.T) {
	withNS := []byte("version: v1alpha1\nmachine:\n  type: worker\n  network:\n    nameservers: [10.5.0.1, fd00::1]\n")

	for _, c := range []struct {
		name string
		cfg  []byte
		want string
	}{
		{"config's nameservers", withNS, "nameserver 10.5.0.1\nnameserver fd00::1\n"},
		{"no config", nil, "nameserver 1.1.1.1\nnameserver 8.8.8.8\n"},
		{"config without nameservers", []byte("version: v1alpha1\nmachine:\n  type: worker\n"), "nameserver 1.1.1.1\nnameserver 8.8.8.8\n"},
	} {
		if got := resolvConf(c.cfg); got != c.want {
			t.Errorf("%s: got %q, want %q", c.name, got, c.want)
		}
	}
}
