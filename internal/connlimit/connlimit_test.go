package connlimit

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// dialFrom connects to addr from the loopback address src.
func dialFrom(t *testing.T, src, addr string) net.Conn {
	t.Helper()

	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}

	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { c.Close() })

	return c
}

// closedByServer reports whether the server ended c (EOF or reset) within a second.
func closedByServer(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(time.Second))

	_, err := c.Read(make([]byte, 1))

	var ne net.Error

	return errors.Is(err, io.EOF) || (err != nil && (!errors.As(err, &ne) || !ne.Timeout()))
}

// Past its limit a source's connections are closed at once; other sources are not affected,
// and a closed connection gives its slot back.
func TestPerSource(t *testing.T) {
	inner, err := net.Listen("tcp", "127.92.0.1:0")
	if err != nil {
		t.Fatal(err)
	}

	l := PerSource(inner, 2)
	defer l.Close()

	accepted := make(chan net.Conn, 10)

	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(accepted)

				return
			}

			accepted <- c
		}
	}()

	addr := l.Addr().String()
	next := func() net.Conn {
		select {
		case c := <-accepted:
			return c
		case <-time.After(5 * time.Second):
			t.Fatal("no connection accepted")

			return nil
		}
	}

	a1, a2 := dialFrom(t, "127.92.0.2", addr), dialFrom(t, "127.92.0.2", addr)
	s1, s2 := next(), next()

	if n := l.Open("127.92.0.2"); n != 2 {
		t.Fatalf("open from 127.92.0.2: %d", n)
	}

	a3 := dialFrom(t, "127.92.0.2", addr)
	if !closedByServer(a3) {
		t.Fatal("a third connection from one source was kept with a limit of 2")
	}

	if closedByServer(a1) || closedByServer(a2) {
		t.Fatal("connections within the limit were closed")
	}

	dialFrom(t, "127.92.0.3", addr)
	next()

	s1.Close()
	s1.Close() // a second close gives nothing back twice

	if n := l.Open("127.92.0.2"); n != 1 {
		t.Fatalf("open from 127.92.0.2 after a close: %d", n)
	}

	a4 := dialFrom(t, "127.92.0.2", addr)
	next()

	if closedByServer(a4) {
		t.Fatal("a closed connection's slot was not given back")
	}

	s2.Close()
}
