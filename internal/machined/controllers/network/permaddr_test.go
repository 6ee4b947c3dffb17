package network

import "testing"

// Links with no device of their own have no permanent address. (A real card's is checked on a
// metal node's virtio card: internal/e2e/metal.)
func TestPermanentAddrOfVirtualLinks(t *testing.T) {
	if a := permanentAddr("lo"); a != nil {
		t.Errorf("lo has a permanent address %s", a)
	}

	if a := permanentAddr("no-such-link"); a != nil {
		t.Errorf("a missing link has a permanent address %s", a)
	}
}
