package logsend

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"
)

// Messages reach a TCP destination (one per line), started after the sender (queued until it
// answers), and a UDP one (one per packet), with upstream's fields and the extra tags.
func TestSend(t *testing.T) {
	// A port that is free now: the TCP receiver comes up on it later.
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}

	tcpAddr := probe.Addr().String()
	probe.Close()

	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()

	s, err := New([]Destination{
		{Endpoint: &url.URL{Scheme: "tcp", Host: tcpAddr}, ExtraTags: map[string]string{"cluster": "c1"}},
		{Endpoint: &url.URL{Scheme: "udp", Host: udp.LocalAddr().String()}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	s.Send("apid", []byte("serving"))
	s.Send("machined", []byte("2026-11-27T07:00:00.000Z\tERROR\tinstall failed\t{\"node\": \"n\"}"))

	// UDP: the first message is a packet of its own.
	buf := make([]byte, 4096)
	_ = udp.SetReadDeadline(time.Now().Add(10 * time.Second))

	n, _, err := udp.ReadFrom(buf)
	if err != nil {
		t.Fatal(err)
	}

	var got map[string]string
	if err = json.Unmarshal(buf[:n], &got); err != nil || got["msg"] != "serving" || got["talos-service"] != "apid" || got["talos-level"] != "info" || got["cluster"] != "" {
		t.Fatalf("UDP message %s: %v", buf[:n], err)
	}

	if _, err = time.Parse(time.RFC3339Nano, got["talos-time"]); err != nil {
		t.Errorf("talos-time: %v", err)
	}

	l, err := net.Listen("tcp", tcpAddr)
	if err != nil {
		t.Skipf("the TCP port was taken meanwhile: %v", err)
	}
	defer l.Close()

	conn, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewScanner(conn)

	for _, want := range []map[string]string{
		{"msg": "serving", "talos-service": "apid", "talos-level": "info", "cluster": "c1"},
		{"talos-service": "machined", "talos-level": "error", "cluster": "c1"},
	} {
		if !r.Scan() {
			t.Fatalf("TCP: %v", r.Err())
		}

		var m map[string]string
		if err = json.Unmarshal(r.Bytes(), &m); err != nil {
			t.Fatalf("TCP line %q: %v", r.Text(), err)
		}

		for k, v := range want {
			if m[k] != v {
				t.Errorf("TCP message %s: %s=%q, want %q", r.Text(), k, m[k], v)
			}
		}
	}
}

func TestRefusesOtherSchemes(t *testing.T) {
	if _, err := New([]Destination{{Endpoint: &url.URL{Scheme: "http", Host: "10.5.0.1:80"}}}); err == nil || !strings.Contains(err.Error(), "tcp://host:port or udp://host:port") {
		t.Fatalf("http endpoint: %v", err)
	}
}

// Messages beyond the queue while the destination is away are dropped, and the destination is
// told how many in a message of its own once it answers.
func TestDroppedAreCounted(t *testing.T) {
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}

	addr := probe.Addr().String()
	probe.Close()

	s, err := New([]Destination{{Endpoint: &url.URL{Scheme: "tcp", Host: addr}}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	// One message is taken by the sender to wait for the destination; the queue holds the next
	// queueLength; the rest are dropped.
	s.Send("apid", []byte("line 0"))

	for deadline := time.Now().Add(10 * time.Second); len(s.dests[0].queue) > 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the sender did not take the first message")
		}
	}

	const extra = 10
	for i := range queueLength + extra {
		s.Send("apid", []byte(fmt.Sprintf("line %d", i+1)))
	}

	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the TCP port was taken meanwhile: %v", err)
	}
	defer l.Close()

	conn, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))

	r := bufio.NewScanner(conn)
	if !r.Scan() {
		t.Fatalf("TCP: %v", r.Err())
	}

	var m map[string]string
	if err = json.Unmarshal(r.Bytes(), &m); err != nil || m["msg"] != fmt.Sprintf("%d log messages were dropped: the destination was away or slow", extra) || m["talos-level"] != "warn" {
		t.Errorf("the first message %s: %v, want the count of the %d dropped", r.Text(), err, extra)
	}

	if !r.Scan() || !strings.Contains(r.Text(), `"msg":"line 0"`) {
		t.Errorf("the next message: %q, want the first line", r.Text())
	}

}

func TestSends(t *testing.T) {
	a := []Destination{{Endpoint: &url.URL{Scheme: "tcp", Host: "127.0.0.1:1"}, ExtraTags: map[string]string{"k": "v"}}}

	s, err := New(a)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	b := []Destination{{Endpoint: &url.URL{Scheme: "tcp", Host: "127.0.0.1:1"}, ExtraTags: map[string]string{"k": "v"}}}
	c := []Destination{{Endpoint: &url.URL{Scheme: "tcp", Host: "127.0.0.1:1"}, ExtraTags: map[string]string{"k": "w"}}}

	if !s.Sends(b) || s.Sends(c) || s.Sends(nil) || s.Sends([]Destination{{}}) {
		t.Errorf("Sends: same %v, other tags %v, none %v", s.Sends(b), s.Sends(c), s.Sends(nil))
	}
}

// Deliver sends any fields (a kernel message's) as one JSON line, the destination's extra tags
// over them.
func TestDeliver(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}

	defer l.Close()

	s, err := New([]Destination{{Endpoint: &url.URL{Scheme: "tcp", Host: l.Addr().String()}, ExtraTags: map[string]string{"cluster": "c1", "facility": "tagged"}}})
	if err != nil {
		t.Fatal(err)
	}

	defer s.Close()

	s.Deliver(t.Context(), map[string]any{"msg": "m1", "seq": int64(7), "facility": "kern"})

	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}

	defer c.Close()

	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}

	if want := `{"cluster":"c1","facility":"tagged","msg":"m1","seq":7}` + "\n"; line != want {
		t.Fatalf("got %q, want %q", line, want)
	}

}
