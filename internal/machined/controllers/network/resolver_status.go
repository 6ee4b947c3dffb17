package network

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// ResolverStatusController reports the resolvers the node's own resolver uses: the name
// servers and search domains of its resolv.conf (the host's in the process mode, the node
// root's in the container mode). Nothing is defaulted: a node without name servers shows none.
type ResolverStatusController struct {
	// Path is the resolv.conf read (default /etc/resolv.conf).
	Path string
}

// Name implements controller.Controller.
func (ctrl *ResolverStatusController) Name() string { return "network.ResolverStatusController" }

// Inputs implements controller.Controller.
func (ctrl *ResolverStatusController) Inputs() []controller.Input { return nil }

// Outputs implements controller.Controller.
func (ctrl *ResolverStatusController) Outputs() []controller.Output {
	return []controller.Output{{Type: network.ResolverStatusType, Kind: controller.OutputExclusive}}
}

// Run implements controller.Controller.
func (ctrl *ResolverStatusController) Run(ctx context.Context, r controller.Runtime, _ *zap.Logger) error {
	path := ctrl.Path
	if path == "" {
		path = "/etc/resolv.conf"
	}

	changed, stop, err := watchFile(path)
	if err != nil {
		return err
	}

	defer stop()

	for {
		data, err := os.ReadFile(path)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("reading %s: %w", path, err)
		}

		servers, search := parseResolvConf(data)

		if err = safe.WriterModify(ctx, r, network.NewResolverStatus(network.NamespaceName, network.ResolverID), func(res *network.ResolverStatus) error {
			res.TypedSpec().DNSServers, res.TypedSpec().SearchDomains = servers, search

			return nil
		}); err != nil {
			return fmt.Errorf("writing resolver status: %w", err)
		}

		select {
		case <-ctx.Done():
			return nil
		case <-r.EventCh():
		case <-changed:
		}
	}
}

// parseResolvConf takes the nameserver and search lines of a resolv.conf (resolv.conf(5)):
// the last search line wins; unparsable name servers are skipped.
func parseResolvConf(data []byte) (servers []netip.Addr, search []string) {
	sc := bufio.NewScanner(bytes.NewReader(data))

	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}

		switch f[0] {
		case "nameserver":
			// A zone (fe80::1%eth0) is kept by ParseAddr.
			if a, err := netip.ParseAddr(f[1]); err == nil {
				servers = append(servers, a)
			}
		case "search", "domain":
			search = f[1:]
		}
	}

	return servers, search
}

// watchFile reports changes to path, including its replacement by a rename (as resolvers
// write it), through inotify on its folder.
func watchFile(path string) (<-chan struct{}, func(), error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, nil, fmt.Errorf("inotify: %w", err)
	}

	if _, err = unix.InotifyAddWatch(fd, filepath.Dir(path), unix.IN_CLOSE_WRITE|unix.IN_MOVED_TO|unix.IN_CREATE|unix.IN_DELETE); err != nil {
		unix.Close(fd)

		return nil, nil, fmt.Errorf("watching %s: %w", filepath.Dir(path), err)
	}

	f := os.NewFile(uintptr(fd), "inotify") // non-blocking: Close ends a pending Read
	changed := make(chan struct{}, 1)
	done := make(chan struct{})

	go func() {
		defer close(done)

		buf := make([]byte, 4096)

		for {
			n, err := f.Read(buf)
			if err != nil {
				return
			}

			if !namesFile(buf[:n], filepath.Base(path)) {
				continue
			}

			select {
			case changed <- struct{}{}:
			default:
			}
		}
	}()

	return changed, func() { f.Close(); <-done }, nil
}

// namesFile reports whether a buffer of inotify events holds one about name.
func namesFile(buf []byte, name string) bool {
	for len(buf) >= unix.SizeofInotifyEvent {
		// struct inotify_event: wd, mask, cookie, len (all 32 bits), then len bytes of name.
		end := unix.SizeofInotifyEvent + int(binary.NativeEndian.Uint32(buf[12:16]))

		if end > len(buf) {
			return true // torn: assume it was
		}

		if string(bytes.TrimRight(buf[unix.SizeofInotifyEvent:end], "\x00")) == name {
			return true
		}

		buf = buf[end:]
	}

	return false
}
