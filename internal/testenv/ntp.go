package testenv

import (
	"encoding/binary"
	"errors"
	"net"
	"testing"
	"time"
)

// ntpEpochOffset is the seconds from NTP's epoch (1900) to Unix's (1970).
const ntpEpochOffset = 2208988800

// NTPServer is a real NTP server (RFC 5905's server mode over UDP) for tests: it answers every
// client request with its clock, the host's moved by Offset, as a stratum 1 server.
type NTPServer struct {
	Addr   string        // host:port it listens on
	Offset time.Duration // added to the host's clock in its answers

	conn     net.PacketConn
	requests chan struct{}
}

// StartNTPServer listens on addr (host:port, port 0 for any) until the test ends.
func StartNTPServer(t testing.TB, addr string, offset time.Duration) *NTPServer {
	t.Helper()

	conn, err := net.ListenPacket("udp", addr)
	if err != nil {
		t.Fatalf("NTP server: %v", err)
	}

	s := &NTPServer{Addr: conn.LocalAddr().String(), Offset: offset, conn: conn, requests: make(chan struct{}, 1000)}
	t.Cleanup(func() { conn.Close() })

	go s.serve()

	return s
}

// Requests is how many requests the server has answered so far.
func (s *NTPServer) Requests() int { return len(s.requests) }

func (s *NTPServer) serve() {
	buf := make([]byte, 512)

	for {
		n, from, err := s.conn.ReadFrom(buf)
		if errors.Is(err, net.ErrClosed) {
			return
		}

		if err != nil || n < 48 || buf[0]&0x7 != 3 { // only client mode
			continue
		}

		received := time.Now().Add(s.Offset)

		resp := make([]byte, 48)
		resp[0] = buf[0]&0x38 | 4 // no leap warning, the client's version, server mode
		resp[1] = 1               // stratum 1: a reference clock
		resp[2] = buf[2]          // the client's poll
		resp[3] = 0xec            // precision 2^-20 s
		copy(resp[12:16], "LOCL")
		putNTPTime(resp[16:], received.Add(-time.Second)) // reference: set a second ago
		copy(resp[24:32], buf[40:48])                     // origin: the client's transmit time
		putNTPTime(resp[32:], received)
		putNTPTime(resp[40:], time.Now().Add(s.Offset))

		if _, err = s.conn.WriteTo(resp, from); err == nil {
			select {
			case s.requests <- struct{}{}:
			default:
			}
		}
	}
}

// putNTPTime writes t as an NTP timestamp: seconds since 1900 and a 32-bit fraction.
func putNTPTime(b []byte, t time.Time) {
	binary.BigEndian.PutUint32(b, uint32(t.Unix()+ntpEpochOffset))
	binary.BigEndian.PutUint32(b[4:], uint32((uint64(t.Nanosecond())<<32)/uint64(time.Second)))
}
