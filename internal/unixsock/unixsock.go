// Package unixsock listens on and dials unix sockets whose paths are longer than the kernel's
// limit for a socket address (108 bytes, which a node's state folder under a long home folder
// or cluster name easily passes): the folder is opened and the socket is named through
// /proc/self/fd/<folder>/<name>, which is short whatever the folder's path.
package unixsock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// maxPath is the longest path a socket address holds (sun_path less its terminating NUL).
const maxPath = 107

// Listen listens on the unix socket at path. The returned listener removes the socket file
// when closed.
func Listen(path string) (net.Listener, error) {
	var l *net.UnixListener

	err := viaShortPath(path, func(name string) error {
		var err error

		l, err = net.ListenUnix("unix", &net.UnixAddr{Name: name, Net: "unix"})

		return err
	})
	if err != nil {
		return nil, err
	}

	// The name it was bound by may be a /proc/self/fd one, which means nothing once the
	// folder is closed: remove the socket by its real path instead.
	l.SetUnlinkOnClose(false)

	return &listener{UnixListener: l, path: path}, nil
}

type listener struct {
	*net.UnixListener
	path string
}

func (l *listener) Close() error {
	err := l.UnixListener.Close()
	if rmErr := os.Remove(l.path); rmErr != nil && !errors.Is(rmErr, os.ErrNotExist) && err == nil {
		err = rmErr
	}

	return err
}

// Dial connects to the unix socket at path.
func Dial(ctx context.Context, path string) (net.Conn, error) {
	var conn net.Conn

	err := viaShortPath(path, func(name string) error {
		var err error

		conn, err = (&net.Dialer{}).DialContext(ctx, "unix", name)

		return err
	})

	return conn, err
}

// GRPCDialer is Dial in the form grpc.WithContextDialer takes; gRPC hands it the target as
// given ("unix:///path", "unix:path" or a bare path).
func GRPCDialer(ctx context.Context, addr string) (net.Conn, error) {
	path := strings.TrimPrefix(strings.TrimPrefix(addr, "unix://"), "unix:")

	return Dial(ctx, path)
}

// viaShortPath calls fn with path itself when it fits a socket address, else with a short name
// for it through the folder opened as a file descriptor (closed once fn returns: the kernel
// has resolved the name by then).
func viaShortPath(path string, fn func(name string) error) error {
	if len(path) <= maxPath {
		return fn(path)
	}

	dir, base := filepath.Split(path)

	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening socket folder %s: %w", dir, err)
	}
	defer unix.Close(fd)

	short := fmt.Sprintf("/proc/self/fd/%d/%s", fd, base)
	if len(short) > maxPath {
		return fmt.Errorf("socket name %q is too long for a unix socket address", base)
	}

	return fn(short)
}
