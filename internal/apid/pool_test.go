package apid

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/credentials/insecure"
)

// TestPoolIsBounded: past its bound the pool drops connections that are neither ready nor
// recently used, and keeps the ones a call is using right now.
func TestPoolIsBounded(t *testing.T) {
	p := newPool(insecure.NewCredentials(), time.Second)
	p.max = 3

	t.Cleanup(p.close)

	for i := range 3 {
		if _, err := p.get(fmt.Sprintf("127.0.0.1:%d", 1+i)); err != nil {
			t.Fatal(err)
		}
	}

	// Just used: a fan-out in progress must not lose them.
	if _, err := p.get("127.0.0.1:4"); err != nil {
		t.Fatal(err)
	}

	if len(p.conns) != 4 {
		t.Fatalf("recently used connections evicted: %d left", len(p.conns))
	}

	// An hour later none of them is recent, and none ever connected (nothing listens there).
	p.mu.Lock()
	for _, e := range p.conns {
		e.lastUsed = e.lastUsed.Add(-time.Hour)
	}
	p.mu.Unlock()

	if _, err := p.get("127.0.0.1:5"); err != nil {
		t.Fatal(err)
	}

	if len(p.conns) != 1 {
		t.Fatalf("stale connections kept: %d in the pool", len(p.conns))
	}
}
