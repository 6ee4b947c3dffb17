package network

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/jsimonetti/rtnetlink/v2"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// The status controllers read the kernel's view of the node's own network namespace (the
// one machined runs in) over rtnetlink: in the process mode that is the host's, in the
// container mode the node's own. They subscribe to the kernel's change announcements, so a
// new address or route shows without polling.

// watchNetlink runs reconcile with a fresh dump connection at the start and again after every
// change the kernel announces to groups (RTMGRP_* bits) or every input change, until ctx ends.
func watchNetlink(ctx context.Context, r controller.Runtime, groups uint32, reconcile func(*rtnetlink.Conn) error) error {
	watch, err := rtnetlink.Dial(&netlink.Config{Groups: groups})
	if err != nil {
		return fmt.Errorf("subscribing to netlink changes: %w", err)
	}

	changed := make(chan struct{}, 1)
	done := make(chan struct{})

	go func() {
		defer close(done)

		for {
			if _, _, err := watch.Receive(); err != nil {
				var errno unix.Errno
				if errors.As(err, &errno) && errno == unix.ENOBUFS {
					// Announcements were lost: a full dump catches up.
				} else {
					return // closed
				}
			}

			select {
			case changed <- struct{}{}:
			default: // a reconcile is already due
			}
		}
	}()

	defer func() {
		watch.Close()
		<-done
	}()

	conn, err := rtnetlink.Dial(nil)
	if err != nil {
		return fmt.Errorf("opening netlink: %w", err)
	}

	defer conn.Close()

	for {
		if err = reconcile(conn); err != nil {
			return err
		}

		select {
		case <-ctx.Done():
			return nil
		case <-r.EventCh():
		case <-changed:
		}
	}
}

// linkNames maps link indexes to names.
func linkNames(conn *rtnetlink.Conn) (map[uint32]string, error) {
	links, err := conn.Link.List()
	if err != nil {
		return nil, fmt.Errorf("listing links: %w", err)
	}

	names := make(map[uint32]string, len(links))
	for _, l := range links {
		if l.Attributes != nil {
			names[l.Index] = l.Attributes.Name
		}
	}

	return names, nil
}

// addr converts a netlink IP (nil when absent) to netip.
func addr(ip net.IP) netip.Addr {
	if ip == nil {
		return netip.Addr{}
	}

	if v4 := ip.To4(); v4 != nil {
		a, _ := netip.AddrFromSlice(v4)

		return a
	}

	a, _ := netip.AddrFromSlice(ip)

	return a
}
