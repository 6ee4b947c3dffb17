// Package ntpserver is a small NTP server (RFC 5905's server mode over UDP): it answers every
// client request with the host's clock as a stratum 1 server. A local cluster's network process
// serves it on the cluster's bridge, so that nodes keep time (and etcd starts) without the
// internet; the tests serve it with an offset to move the nodes' clocks.
package ntpserver

import (
	"encoding/binary"
	"errors"
	"net"
	"sync/atomic"
	"time"
)

// ntpEpochOffset is the seconds from NTP's epoch (1900) to Unix's (1970).
const ntpEpochOffset = 2208988800

// Server answers NTP client requests on a packet connection.
type Server struct {
	Offset time.Duration // added to the host's clock in its answers

	requests atomic.Int64
}

// Requests is how many requests the server has answered so far.
func (s *Server) Requests() int { return int(s.requests.Load()) }

// Serve answers the requests that come to conn until it is closed.
func (s *Server) Serve(conn net.PacketConn) {
	buf := make([]byte, 512)

	for {
		n, from, err := conn.ReadFrom(buf)
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

		if _, err = conn.WriteTo(resp, from); err == nil {
			s.requests.Add(1)
		}
	}
}

// putNTPTime writes t as an NTP timestamp: seconds since 1900 and a 32-bit fraction.
func putNTPTime(b []byte, t time.Time) {
	binary.BigEndian.PutUint32(b, uint32(t.Unix()+ntpEpochOffset))
	binary.BigEndian.PutUint32(b[4:], uint32((uint64(t.Nanosecond())<<32)/uint64(time.Second)))
}
