package hostdns

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/miekg/dns"
)

// Listener serves a handler on one address over UDP and TCP.
type Listener struct {
	servers []*dns.Server
}

// Listen binds addr over UDP and TCP before it returns (a taken address is an error here),
// then serves h in the background until Close.
func Listen(addr netip.AddrPort, h dns.Handler) (*Listener, error) {
	pc, err := net.ListenPacket("udp", addr.String())
	if err != nil {
		return nil, fmt.Errorf("listening on udp %s: %w", addr, err)
	}

	ln, err := net.Listen("tcp", addr.String())
	if err != nil {
		pc.Close()

		return nil, fmt.Errorf("listening on tcp %s: %w", addr, err)
	}

	l := &Listener{servers: []*dns.Server{
		{PacketConn: pc, Handler: h},
		// A TCP client that sends nothing is dropped after the read timeout.
		{Listener: ln, Handler: h, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second},
	}}

	// Shutdown refuses a server that has not started yet: Listen returns once both serve.
	started := make(chan struct{}, len(l.servers))

	for _, s := range l.servers {
		s.NotifyStartedFunc = func() { started <- struct{}{} }

		go s.ActivateAndServe() //nolint:errcheck // ends with Close
	}

	for range l.servers {
		<-started
	}

	return l, nil
}

// Close stops serving and releases the address.
func (l *Listener) Close() error {
	var errs []error

	for _, s := range l.servers {
		if err := s.Shutdown(); err != nil {
			errs = append(errs, err)
		}
	}

	return errors.Join(errs...)
}
