package kubeprism

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
)

// named answers each connection with its name.
func named(t *testing.T, name string) string {
	t.Helper()

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { l.Close() })

	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}

			fmt.Fprintln(c, name)
			c.Close()
		}
	}()

	return l.Addr().String()
}

func through(t *testing.T, addr string) string {
	t.Helper()

	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return ""
	}
	defer c.Close()

	line, _ := bufio.NewReader(c).ReadString('\n')

	return strings.TrimSpace(line)
}

func TestBalancerSkipsDownUpstreams(t *testing.T) {
	down := named(t, "down")
	up := named(t, "up")

	// An address nothing listens on any more.
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	gone := l.Addr().String()
	l.Close()

	lb := New(zap.NewNop())
	lb.SetUpstreams([]string{gone, up})

	front, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := front.Addr().String()
	front.Close()

	go lb.Serve(t.Context(), addr)

	deadline := time.Now().Add(10 * time.Second)
	for through(t, addr) != "up" {
		if time.Now().After(deadline) {
			t.Fatal("no connection reached the healthy upstream")
		}

		time.Sleep(50 * time.Millisecond)
	}

	if !lb.Healthy() {
		t.Error("healthy with one upstream answering: false")
	}

	// New upstreams are taken at once.
	lb.SetUpstreams([]string{down})

	for through(t, addr) != "down" {
		if time.Now().After(deadline) {
			t.Fatal("the new upstream list was not used")
		}

		time.Sleep(50 * time.Millisecond)
	}

	lb.SetUpstreams([]string{gone})

	for lb.Healthy() {
		if time.Now().After(deadline) {
			t.Fatal("healthy with no upstream answering")
		}

		time.Sleep(50 * time.Millisecond)
	}

	if got := through(t, addr); got != "" {
		t.Errorf("a connection with no upstream got %q", got)
	}
}
