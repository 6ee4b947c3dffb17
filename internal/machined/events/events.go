// Package events is machined's event bus: every boot phase, task, service state change and
// config event is published here and streamed by the Events API, with a tail of recent events.
package events

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
)

// Event is one published event.
type Event struct {
	ID      string // sortable: later events have greater IDs
	Time    time.Time
	ActorID string
	Payload proto.Message
}

// Bus keeps the last Capacity events and wakes up watchers on publish.
type Bus struct {
	mu      sync.Mutex
	ring    []Event
	next    uint64 // sequence number of the next event
	changed chan struct{}
}

// Capacity is how many events the bus remembers for tails.
const Capacity = 1000

// NewBus creates an empty bus.
func NewBus() *Bus {
	return &Bus{ring: make([]Event, 0, Capacity), changed: make(chan struct{})}
}

// Publish records an event and wakes watchers.
func (b *Bus) Publish(payload proto.Message, actorID string) {
	b.mu.Lock()
	defer b.mu.Unlock()

	now := time.Now()
	ev := Event{
		ID:      fmt.Sprintf("%016x%08x", now.UnixNano(), b.next&0xffffffff),
		Time:    now,
		ActorID: actorID,
		Payload: payload,
	}
	b.next++

	if len(b.ring) < Capacity {
		b.ring = append(b.ring, ev)
	} else {
		b.ring[(b.next-1)%Capacity] = ev
	}

	close(b.changed)
	b.changed = make(chan struct{})
}

// snapshot returns events in order with their sequence numbers starting at first.
func (b *Bus) snapshot() (events []Event, first uint64, changed chan struct{}) {
	n := uint64(len(b.ring))
	first = b.next - n
	events = make([]Event, 0, n)

	for seq := first; seq < b.next; seq++ {
		events = append(events, b.ring[seq%Capacity])
	}

	return events, first, b.changed
}

// TailOptions choose where a watch starts in the remembered events.
type TailOptions struct {
	Events int32  // last N events; -1 for all remembered
	ID     string // events after this ID
	// Seconds selects events younger than this (the API's tail_seconds).
	Seconds time.Duration //nolint:staticcheck // named after the API field
}

// Watch calls fn for the tail selected by opts, then for every new event, until ctx ends or fn
// returns an error.
func (b *Bus) Watch(ctx context.Context, opts TailOptions, fn func(Event) error) error {
	b.mu.Lock()
	events, first, changed := b.snapshot()
	b.mu.Unlock()

	start := len(events) // by default only new events
	switch {
	case opts.ID != "":
		start = len(events)
		for i, ev := range events {
			if ev.ID > opts.ID {
				start = i
				break
			}
		}
	case opts.Seconds > 0:
		cutoff := time.Now().Add(-opts.Seconds)
		for i, ev := range events {
			if ev.Time.After(cutoff) {
				start = i
				break
			}
		}
	case opts.Events < 0:
		start = 0
	case opts.Events > 0:
		start = max(0, len(events)-int(opts.Events))
	}

	for _, ev := range events[start:] {
		if err := fn(ev); err != nil {
			return err
		}
	}

	seen := first + uint64(len(events))

	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}

		b.mu.Lock()
		events, first, changed = b.snapshot()
		b.mu.Unlock()

		if seen < first {
			seen = first // we fell behind the ring; skip what was overwritten
		}

		for _, ev := range events[seen-first:] {
			if err := fn(ev); err != nil {
				return err
			}
		}

		seen = first + uint64(len(events))
	}
}
