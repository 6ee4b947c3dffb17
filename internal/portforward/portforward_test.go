package portforward

import (
	"bufio"
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	node := netip.MustParseAddr("10.5.0.2")

	rules, err := Parse("8080:80/tcp, 5353:53/udp,6443:6443", "127.0.0.1", node)
	if err != nil {
		t.Fatal(err)
	}

	want := []string{"tcp 127.0.0.1:8080 -> 10.5.0.2:80", "udp 127.0.0.1:5353 -> 10.5.0.2:53", "tcp 127.0.0.1:6443 -> 10.5.0.2:6443"}
	if len(rules) != len(want) {
		t.Fatalf("rules %v, want %v", rules, want)
	}

	for i, r := range rules {
		if r.String() != want[i] {
			t.Errorf("rule %d: %s, want %s", i, r, want[i])
		}
	}

	for _, bad := range []struct{ list, host, says string }{
		{"8080", "0.0.0.0", "<hostPort>:<nodePort>"},
		{"8080:80/sctp", "0.0.0.0", `"sctp" is not tcp or udp`},
		{"0:80", "0.0.0.0", "<hostPort>:<nodePort>"},
		{"70000:80", "0.0.0.0", "<hostPort>:<nodePort>"},
		{"8080:80", "localhost", "--docker-host-ip"},
	} {
		if _, err := Parse(bad.list, bad.host, node); err == nil || !strings.Contains(err.Error(), bad.says) {
			t.Errorf("Parse(%q, %q): %v, want an error saying %q", bad.list, bad.host, err, bad.says)
		}
	}
}

// echo serves TCP and UDP on a loopback port, answering each line or datagram with "echo: "
// and what it got.
func echo(t *testing.T) netip.AddrPort {
	t.Helper()

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { l.Close() })

	addr := l.Addr().(*net.TCPAddr).AddrPort()

	u, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(addr))
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { u.Close() })

	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}

			go func() {
				defer c.Close()

				line, _ := bufio.NewReader(c).ReadString('\n')
				c.Write([]byte("echo: " + line))
			}()
		}
	}()

	go func() {
		buf := make([]byte, 1500)

		for {
			n, from, err := u.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}

			u.WriteToUDPAddrPort(append([]byte("echo: "), buf[:n]...), from)
		}
	}()

	return addr
}

// The listeners made by Listen relay TCP connections and UDP datagrams both ways; a port in
// use is refused, naming it.
func TestRelay(t *testing.T) {
	target := echo(t)

	// Free ports for the host side: take two and let them go.
	var ports []uint16

	for range 2 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}

		ports = append(ports, uint16(l.Addr().(*net.TCPAddr).Port))
		l.Close()
	}

	rules := []Rule{
		{Proto: "tcp", Listen: netip.AddrPortFrom(target.Addr(), ports[0]), To: target},
		{Proto: "udp", Listen: netip.AddrPortFrom(target.Addr(), ports[1]), To: target},
	}

	files, err := Listen(rules)
	if err != nil {
		t.Fatal(err)
	}

	if _, err = Listen(rules[:1]); err == nil || !strings.Contains(err.Error(), rules[0].Listen.String()) {
		t.Errorf("a port in use: %v, want it refused naming %s", err, rules[0].Listen)
	}

	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)

	tl, err := net.FileListener(files[0])
	if err != nil {
		t.Fatal(err)
	}

	up, err := net.FilePacketConn(files[1])
	if err != nil {
		t.Fatal(err)
	}

	go serveTCP(ctx, tl, target)
	go serveUDP(ctx, up.(*net.UDPConn), target)

	c, err := net.Dial("tcp", rules[0].Listen.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	c.Write([]byte("hello\n"))

	c.SetReadDeadline(time.Now().Add(10 * time.Second))

	if got, _ := bufio.NewReader(c).ReadString('\n'); got != "echo: hello\n" {
		t.Errorf("through the TCP relay: %q", got)
	}

	u, err := net.Dial("udp", rules[1].Listen.String())
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()

	u.Write([]byte("ping"))
	u.SetReadDeadline(time.Now().Add(10 * time.Second))

	buf := make([]byte, 100)

	n, err := u.Read(buf)
	if err != nil || string(buf[:n]) != "echo: ping" {
		t.Errorf("through the UDP relay: %q, %v", buf[:n], err)
	}
}
