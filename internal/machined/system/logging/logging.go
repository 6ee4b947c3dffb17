// Package logging keeps each service's output: appended to a file under EPHEMERAL/log (so it
// survives a restart of the node) and readable with a tail and follow by the Logs API.
package logging

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"sync/atomic"
)

// MaxSize is the size at which a log file is cut down to its newer half.
const MaxSize = 4 << 20

var validID = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]*$`)

// Manager hands out per-service log writers and readers.
type Manager struct {
	dir     string
	mu      sync.Mutex
	logs    map[string]*serviceLog
	console atomic.Pointer[io.Writer] // the machine config's debug: every service's lines, too
	forward atomic.Pointer[func(id string, line []byte)]
}

// SetForward calls fn with every line of every log, machined's own included, without its
// newline (machine.logging.destinations); nil stops it. fn must not block.
func (m *Manager) SetForward(fn func(id string, line []byte)) {
	if fn == nil {
		m.forward.Store(nil)

		return
	}

	m.forward.Store(&fn)
}

// SetConsole sends every service's lines to w as well, each prefixed with the service's name
// (upstream's `debug: true`: the system services' logs on the console); nil stops it.
// machined's own log is on the console already and is left out.
func (m *Manager) SetConsole(w io.Writer) {
	if w == nil {
		m.console.Store(nil)

		return
	}

	m.console.Store(&w)
}

// NewManager keeps logs in dir.
func NewManager(dir string) (*Manager, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating log folder %s: %w", dir, err)
	}

	return &Manager{dir: dir, logs: map[string]*serviceLog{}}, nil
}

// ConsoleID is machined's own log, which goes to the console already.
const ConsoleID = "machined"

type serviceLog struct {
	id      string
	m       *Manager
	path    string
	mu      sync.Mutex
	f       *os.File
	size    int64
	changed chan struct{}
}

// get returns id's log. A log is registered once a writer was handed out for it or its file
// exists (written before a restart); otherwise get creates it only when create is set, so that
// reads of unknown IDs are refused and leave nothing behind.
func (m *Manager) get(id string, create bool) (*serviceLog, error) {
	if !validID.MatchString(id) {
		if !create {
			return nil, notRegistered(id) // no writer takes such an ID: a path, say
		}

		return nil, fmt.Errorf("invalid log id %q", id)
	}

	m.mu.Lock()
	defer m.mu.Unlock()

	if l, ok := m.logs[id]; ok {
		return l, nil
	}

	path := filepath.Join(m.dir, id+".log")

	if !create {
		if _, err := os.Stat(path); err != nil {
			return nil, notRegistered(id)
		}
	}

	l := &serviceLog{id: id, m: m, path: path, changed: make(chan struct{})}
	m.logs[id] = l

	return l, nil
}

// notRegistered is upstream's wording for a log nobody writes.
func notRegistered(id string) error {
	return fmt.Errorf("%w: log %q was not registered", ErrNotFound, id)
}

// Writer returns the writer for a service's output, registering its log. Writes are safe from
// many goroutines.
func (m *Manager) Writer(id string) (io.Writer, error) {
	l, err := m.get(id, true)
	if err != nil {
		return nil, err
	}

	return l, nil
}

// Close closes all open log files.
func (m *Manager) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()

	for _, l := range m.logs {
		l.mu.Lock()
		if l.f != nil {
			l.f.Close()
			l.f = nil
		}
		l.mu.Unlock()
	}

	return nil
}

func (l *serviceLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()

	if l.f == nil {
		f, err := os.OpenFile(l.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return 0, err
		}

		st, err := f.Stat()
		if err != nil {
			f.Close()
			return 0, err
		}

		l.f, l.size = f, st.Size()
	}

	n, err := l.f.Write(p)
	l.size += int64(n)

	if w := l.m.console.Load(); w != nil && l.id != ConsoleID {
		(*w).Write(prefixLines(l.id, p)) //nolint:errcheck // the console is best effort
	}

	if fn := l.m.forward.Load(); fn != nil {
		for line := range bytes.Lines(p) {
			(*fn)(l.id, bytes.TrimSuffix(line, []byte("\n")))
		}
	}

	if l.size > MaxSize {
		l.shrink()
	}

	close(l.changed)
	l.changed = make(chan struct{})

	return n, err
}

// prefixLines puts "id: " before each line of p.
func prefixLines(id string, p []byte) []byte {
	var b bytes.Buffer

	for line := range bytes.Lines(p) {
		b.WriteString(id)
		b.WriteString(": ")
		b.Write(line)
	}

	return b.Bytes()
}

// shrink keeps the newer half of the file, starting at a line boundary.
func (l *serviceLog) shrink() {
	data, err := os.ReadFile(l.path)
	if err != nil {
		return
	}

	data = data[len(data)/2:]
	if i := bytes.IndexByte(data, '\n'); i >= 0 {
		data = data[i+1:]
	}

	tmp := l.path + ".tmp"
	if err = os.WriteFile(tmp, data, 0o600); err != nil {
		return
	}

	if err = os.Rename(tmp, l.path); err != nil {
		return
	}

	l.f.Close()
	l.f = nil

	if f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND, 0o600); err == nil {
		l.f, l.size = f, int64(len(data))
	}
}

// ErrNotFound is returned for a log that is not registered: no writer was handed out for it
// and it has no file.
var ErrNotFound = errors.New("log not found")

// Read sends the last tailLines lines (all when negative) of a service's log to fn, then, when
// follow is set, every new chunk until ctx ends. It sends in pieces of at most ChunkSize, which
// fn must not keep after it returns; the file is never read whole. An unregistered log is
// ErrNotFound, following or not (as upstream: only a writer registers a log); a registered one
// without lines yet sends nothing, or waits for them when following.
func (m *Manager) Read(ctx context.Context, id string, tailLines int, follow bool, fn func([]byte) error) error {
	l, err := m.get(id, false)
	if err != nil {
		return err
	}

	// The file and its size are taken under the lock, so a shrink (which replaces the file)
	// is either all before or all after; what is read afterwards is that file, to that size.
	l.mu.Lock()
	changed := l.changed
	f, size, err := openSized(l.path)
	l.mu.Unlock()

	var offset int64

	switch {
	case errors.Is(err, os.ErrNotExist): // registered, nothing written yet
	case err != nil:
		return err
	default:
		err = SendTail(f, size, tailLines, fn)
		f.Close()

		if err != nil {
			return err
		}

		offset = size
	}

	for follow {
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		}

		l.mu.Lock()
		changed = l.changed
		f, size, err = openSized(l.path)
		l.mu.Unlock()

		if err != nil {
			return err
		}

		if size < offset { // file was shrunk: resume at the end
			f.Close()

			offset = size

			continue
		}

		err = SendRange(f, offset, size, fn)
		f.Close()

		if err != nil {
			return err
		}

		offset = size
	}

	return nil
}
