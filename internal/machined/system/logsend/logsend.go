// Package logsend sends the node's log lines to the machine config's logging destinations
// (upstream's machine.logging.destinations): json_lines over TCP (a message per line) or UDP (a
// message per packet), each message with msg, talos-level, talos-service, talos-time and the
// destination's extraTags.
package logsend

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
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
	dests []*dest
	wg    sync.WaitGroup
	stop  chan struct{}
}

type dest struct {
	network, addr string
	tags          map[string]string
	queue         chan []byte
	dropped       atomic.Int64
}

// New starts sending to dests; a destination with another scheme is refused, naming it.
func New(dests []Destination) (*Sender, error) {
	s := &Sender{stop: make(chan struct{})}

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

// Send queues one line of a service's log (machined's own included) for every destination.
func (s *Sender) Send(service string, line []byte) {
	now := time.Now().UTC().Format(time.RFC3339Nano)

	for _, d := range s.dests {
		msg := map[string]string{}
		for k, v := range d.tags {
			msg[k] = v
		}

		msg["msg"], msg["talos-service"], msg["talos-level"], msg["talos-time"] = string(line), service, level(line), now

		b, err := json.Marshal(msg)
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
// destination is away.
func (d *dest) run(stop <-chan struct{}) {
	var conn net.Conn

	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()

	for {
		var msg []byte

		select {
		case <-stop:
			return
		case msg = <-d.queue:
		}

		if d.network == "tcp" {
			msg = append(msg, '\n')
		}

		for conn == nil {
			c, err := net.DialTimeout(d.network, d.addr, 5*time.Second)
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

		_ = conn.SetWriteDeadline(time.Now().Add(5 * time.Second))

		if _, err := conn.Write(msg); err != nil {
			conn.Close()
			conn = nil
		}
	}
}
