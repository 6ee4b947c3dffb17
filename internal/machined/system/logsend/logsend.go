// Package logsend sends the node's log lines to the machine config's logging destinations
// (upstream's machine.logging.destinations): json_lines over TCP (a message per line) or UDP (a
// message per packet), each message with msg, talos-level, talos-service, talos-time and the
// destination's extraTags.
package logsend

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Destination is where messages go: tcp://host:port or udp://host:port, with extra fields.
type Destination struct {
	Endpoint  *url.URL
	ExtraTags map[string]string
}

// queueLength is how many messages wait for a destination that is slow or away; more are
// dropped, so that logging never holds a service up.
const queueLength = 1024

// Sender sends to every destination from a goroutine of its own.
type Sender struct {
	config []Destination
	dests  []*dest
	wg     sync.WaitGroup
	stop   chan struct{}
}

type dest struct {
	network, addr string
	tags          map[string]string
	queue         chan []byte
	dropped       atomic.Int64
}

// New starts sending to dests; a destination with another scheme is refused, naming it.
func New(dests []Destination) (*Sender, error) {
	s := &Sender{stop: make(chan struct{}), config: dests}

	for _, d := range dests {
		if d.Endpoint == nil || (d.Endpoint.Scheme != "tcp" && d.Endpoint.Scheme != "udp") || d.Endpoint.Host == "" {
			return nil, fmt.Errorf("machine.logging.destinations: endpoint %v: use tcp://host:port or udp://host:port", d.Endpoint)
		}

		s.dests = append(s.dests, &dest{network: d.Endpoint.Scheme, addr: d.Endpoint.Host, tags: d.ExtraTags, queue: make(chan []byte, queueLength)})
	}

	for _, d := range s.dests {
		s.wg.Add(1)

		go func() {
			defer s.wg.Done()
			d.run(s.stop)
		}()
	}

	return s, nil
}

// Sends reports whether the sender sends to exactly these destinations.
func (s *Sender) Sends(dests []Destination) bool {
	return slices.EqualFunc(s.config, dests, func(a, b Destination) bool {
		return endpoint(a) == endpoint(b) && maps.Equal(a.ExtraTags, b.ExtraTags)
	})
}

func endpoint(d Destination) string {
	if d.Endpoint == nil {
		return ""
	}

	return d.Endpoint.String()
}

// Send queues one line of a service's log (machined's own included) for every destination.
func (s *Sender) Send(service string, line []byte) {
	now := time.Now().UTC().Format(time.RFC3339Nano)

	for _, d := range s.dests {
		b, err := d.message(string(line), service, level(line), now)
		if err != nil {
			continue
		}

		select {
		case d.queue <- b:
		default:
			d.dropped.Add(1)
		}
	}
}

// Close stops sending; queued messages not sent yet are dropped.
func (s *Sender) Close() {
	close(s.stop)
	s.wg.Wait()
}

// Deliver queues one message of fields for every destination, waiting while a destination's
// queue is full rather than dropping at once: the caller (the kernel log's reader) has a
// buffer of its own to hold the rest meanwhile. Once ctx ends the message is dropped where it
// still waits, and the destination is told of the gap in its next message.
func (s *Sender) Deliver(ctx context.Context, fields map[string]any) {
	for _, d := range s.dests {
		b, err := d.encode(fields)
		if err != nil {
			d.dropped.Add(1)

			continue
		}

		select {
		case d.queue <- b:
		case <-ctx.Done():
			d.dropped.Add(1)
		}
	}
}

// message is one line of a service's log to d.
func (d *dest) message(line, service, level, at string) ([]byte, error) {
	return d.encode(map[string]any{"msg": line, "talos-service": service, "talos-level": level, "talos-time": at})
}

// encode is one message to d: the fields, then d's extra tags (which win, as upstream's).
func (d *dest) encode(fields map[string]any) ([]byte, error) {
	msg := make(map[string]any, len(fields)+len(d.tags))
	maps.Copy(msg, fields)

	for k, v := range d.tags {
		msg[k] = v
	}

	return json.Marshal(msg)
}

// level is a machined line's zap level (its second tab-separated field), else info.
func level(line []byte) string {
	if f := bytes.SplitN(line, []byte("\t"), 3); len(f) == 3 {
		switch l := string(f[1]); l {
		case "DEBUG", "INFO", "WARN", "ERROR":
			return strings.ToLower(l)
		}
	}

	return "info"
}

// run sends the queue's messages, connecting (again) when needed: a second apart while the
// destination is away. Messages dropped meanwhile (the queue was full) are counted in a
// message of their own, sent before the next one, so the destination knows of the gap.
func (d *dest) run(stop <-chan struct{}) {
	var conn net.Conn

	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()

	// Dialling ends with stop: Close does not wait out a destination's timeout.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	go func() {
		<-stop
		cancel()
	}()

	for {
		var msg []byte

		select {
		case <-stop:
			return
		case msg = <-d.queue:
		}

		for conn == nil {
			dctx, dcancel := context.WithTimeout(ctx, 5*time.Second)
			c, err := (&net.Dialer{}).DialContext(dctx, d.network, d.addr)

			dcancel()

			if err == nil {
				conn = c

				break
			}

			select {
			case <-stop:
				return
			case <-time.After(time.Second):
			}
		}

		if n := d.dropped.Swap(0); n > 0 {
			gap, err := d.message(fmt.Sprintf("%d log messages were dropped: the destination was away or slow", n), "machined", "warn",
				time.Now().UTC().Format(time.RFC3339Nano))
			if err == nil && !d.write(&conn, gap) {
				d.dropped.Add(n) // told with the next one

				continue
			}
		}

		d.write(&conn, msg)
	}
}

// write sends one message on *conn, closing it on an error (the next message dials again).
func (d *dest) write(conn *net.Conn, msg []byte) bool {
	if d.network == "tcp" {
		msg = append(msg, '\n')
	}

	_ = (*conn).SetWriteDeadline(time.Now().Add(5 * time.Second))

	if _, err := (*conn).Write(msg); err != nil {
		(*conn).Close()
		*conn = nil

		return false
	}

	return true
}
