// Package udev is a metal node's udevd, in Go: it reads the kernel's uevents (a new device's
// modalias, block devices coming and going), probes block devices for what they hold (partition
// table, filesystem, labels) and keeps the /dev/disk/by-* links.
package udev

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// Event is one kernel uevent.
type Event struct {
	Action  string            // add, remove, change, bind, ...
	DevPath string            // under /sys
	Env     map[string]string // SUBSYSTEM, DEVNAME, DEVTYPE, MODALIAS, PARTN, PARTNAME, ...
}

// Conn reads the kernel's uevents.
type Conn struct{ fd int }

// Listen opens a netlink socket on the kernel's uevent broadcast.
func Listen() (*Conn, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_KOBJECT_UEVENT)
	if err != nil {
		return nil, fmt.Errorf("uevent socket: %w", err)
	}

	// A large buffer: a burst of events (a disk and its partitions) must not be dropped.
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20)

	if err = unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: 1}); err != nil {
		unix.Close(fd)

		return nil, fmt.Errorf("uevent socket: %w", err)
	}

	return &Conn{fd: fd}, nil
}

// Read waits for the next event.
func (c *Conn) Read() (Event, error) {
	buf := make([]byte, 64<<10)

	for {
		n, _, err := unix.Recvfrom(c.fd, buf, 0)
		if err != nil {
			return Event{}, err
		}

		if ev, ok := ParseEvent(buf[:n]); ok {
			return ev, nil
		}
	}
}

// Close ends Read with an error.
func (c *Conn) Close() error { return unix.Close(c.fd) }

// Subscribe listens for uevents and sends each on the channel it returns until ctx ends or stop
// is called (stop closes the socket). Each controller that follows devices holds its own.
func Subscribe(ctx context.Context) (events <-chan Event, stop func(), err error) {
	conn, err := Listen()
	if err != nil {
		return nil, func() {}, err
	}

	ch := make(chan Event, 64)

	go func() {
		for {
			ev, err := conn.Read()
			if err != nil {
				return
			}

			select {
			case ch <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()

	return ch, func() { _ = conn.Close() }, nil
}

// ParseEvent reads a kernel uevent message: "ACTION@DEVPATH", then KEY=VALUE, NUL-separated.
// Messages of udevd's own format ("libudev" header) are not the kernel's and are skipped.
func ParseEvent(b []byte) (Event, bool) {
	fields := bytes.Split(bytes.TrimRight(b, "\x00"), []byte{0})
	if len(fields) < 2 {
		return Event{}, false
	}

	action, devpath, ok := strings.Cut(string(fields[0]), "@")
	if !ok {
		return Event{}, false
	}

	ev := Event{Action: action, DevPath: devpath, Env: map[string]string{}}

	for _, f := range fields[1:] {
		if k, v, ok := strings.Cut(string(f), "="); ok {
			ev.Env[k] = v
		}
	}

	return ev, true
}
