package udev

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// Subscribe delivers the kernel's uevents: writing "change" to a device's uevent file makes the
// kernel broadcast one for it (root only: CI runs as root).
func TestSubscribeDeliversTheKernelsUevents(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("writing a uevent file needs root")
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	events, stop, err := Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()

	if err := os.WriteFile("/sys/class/net/lo/uevent", []byte("change"), 0o200); err != nil {
		t.Fatal(err)
	}

	for {
		select {
		case ev := <-events:
			if ev.Action == "change" && strings.HasSuffix(ev.DevPath, "/net/lo") {
				return
			}
		case <-ctx.Done():
			t.Fatal("no change event for lo within a minute")
		}
	}
}
