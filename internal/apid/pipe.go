package apid

import (
	"context"
	"net"
	"os"
	"sync"
	"syscall"
)

// pipeListener hands the router connections made in process (socket pairs): nothing outside
// apid can reach it, which is why the router may trust the roles in the metadata.
type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.done) })

	return nil
}

func (l *pipeListener) Addr() net.Addr { return &net.UnixAddr{Name: "apid-router", Net: "unix"} }

// Dial makes a socket pair and hands one end to Accept.
func (l *pipeListener) Dial(ctx context.Context) (net.Conn, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}

	ends := make([]net.Conn, 2)

	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "apid-router")
		ends[i], err = net.FileConn(f)
		f.Close()

		if err != nil {
			for _, c := range ends[:i] {
				c.Close()
			}

			if i == 0 {
				syscall.Close(fds[1])
			}

			return nil, err
		}
	}

	select {
	case l.conns <- ends[1]:
		return ends[0], nil
	case <-l.done:
	case <-ctx.Done():
	}

	ends[0].Close()
	ends[1].Close()

	return nil, net.ErrClosed
}
