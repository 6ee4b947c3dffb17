package apid

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// TestPoolIsBounded: the pool's bound is hard. A connection a call holds is never closed for
// room, however old; with all of them held, one more node is refused (ResourceExhausted,
// naming the bound); one that is released and not ready makes room at once.
func TestPoolIsBounded(t *testing.T) {
	p := newPool(insecure.NewCredentials(), time.Second)
	p.max = 3

	t.Cleanup(p.close)

	var releases []func()

	for i := range 3 {
		_, release, err := p.get(fmt.Sprintf("127.0.0.1:%d", 1+i))
		if err != nil {
			t.Fatal(err)
		}

		releases = append(releases, release)
	}

	// Held for an hour, and never connected (nothing listens there): still held.
	p.mu.Lock()
	for _, e := range p.conns {
		e.lastUsed = e.lastUsed.Add(-time.Hour)
	}
	p.mu.Unlock()

	_, _, err := p.get("127.0.0.1:4")
	if st := status.Convert(err); st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "at most 3 nodes") {
		t.Fatalf("a fourth node with three held: %v", err)
	}

	if len(p.conns) != 3 {
		t.Fatalf("pool of 3 holds %d connections", len(p.conns))
	}

	// The same node again shares its connection: no room needed.
	_, again, err := p.get("127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}

	again()
	releases[0]()
	releases[0]() // a second release changes nothing

	_, release, err := p.get("127.0.0.1:4")
	if err != nil {
		t.Fatalf("a released connection made no room: %v", err)
	}

	release()

	p.mu.Lock()
	defer p.mu.Unlock()

	if _, ok := p.conns["127.0.0.1:1"]; ok || len(p.conns) != 3 {
		t.Fatalf("pool after making room: %d connections, the released one kept: %v", len(p.conns), ok)
	}

	for addr, e := range p.conns {
		if want := map[bool]int{true: 1, false: 0}[addr != "127.0.0.1:4"]; e.users != want {
			t.Errorf("%s: %d users, want %d", addr, e.users, want)
		}
	}
}
