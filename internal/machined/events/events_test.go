package events

import (
	"context"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
)

func TestTailAndFollow(t *testing.T) {
	b := NewBus()
	for i := range 5 {
		b.Publish(&machine.PhaseEvent{Phase: string(rune('a' + i))}, "")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	var got []string
	done := make(chan error, 1)
	tailed := make(chan struct{}) // the tail is delivered: the watch is past its snapshot
	go func() {
		done <- b.Watch(ctx, TailOptions{Events: 2}, func(ev Event) error {
			got = append(got, ev.Payload.(*machine.PhaseEvent).Phase)
			switch len(got) {
			case 2:
				close(tailed)
			case 3:
				cancel()
			}
			return nil
		})
	}()

	<-tailed
	b.Publish(&machine.PhaseEvent{Phase: "z"}, "")
	<-done

	if want := []string{"d", "e", "z"}; len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestTailByIDAndRingOverflow(t *testing.T) {
	b := NewBus()
	for range Capacity + 10 {
		b.Publish(&machine.PhaseEvent{}, "")
	}

	var all []Event
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = b.Watch(ctx, TailOptions{Events: -1}, func(ev Event) error { all = append(all, ev); return nil })

	if len(all) != Capacity {
		t.Fatalf("tail -1 returned %d events, want %d", len(all), Capacity)
	}
	for i := 1; i < len(all); i++ {
		if all[i].ID <= all[i-1].ID {
			t.Fatalf("event IDs not increasing at %d", i)
		}
	}

	var after []Event
	_ = b.Watch(ctx, TailOptions{ID: all[len(all)-3].ID}, func(ev Event) error { after = append(after, ev); return nil })
	if len(after) != 2 {
		t.Fatalf("events after ID: got %d, want 2", len(after))
	}
}
