package testenv

import (
	"net"
	"testing"
	"time"

	"github.com/talos-go/talos/internal/ntpserver"
)

// NTPServer is a real NTP server for tests (internal/ntpserver): it answers every client
// request with its clock, the host's moved by Offset, as a stratum 1 server.
type NTPServer struct {
	Addr string // host:port it listens on

	server *ntpserver.Server
}

// StartNTPServer listens on addr (host:port, port 0 for any) until the test ends.
func StartNTPServer(t testing.TB, addr string, offset time.Duration) *NTPServer {
	t.Helper()

	conn, err := net.ListenPacket("udp", addr)
	if err != nil {
		t.Fatalf("NTP server: %v", err)
	}

	s := &NTPServer{Addr: conn.LocalAddr().String(), server: &ntpserver.Server{Offset: offset}}
	t.Cleanup(func() { conn.Close() })

	go s.server.Serve(conn)

	return s
}

// Requests is how many requests the server has answered so far.
func (s *NTPServer) Requests() int { return s.server.Requests() }
