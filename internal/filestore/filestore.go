// Package filestore keeps a value loaded from a folder of files and loads it again when the
// files change, so a service picks up rotated certificates without a restart.
package filestore

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Store holds the value loaded from Files in a folder.
type Store[T any] struct {
	dir   string
	files []string
	load  func(dir string) (T, error)

	mu     sync.RWMutex
	value  T
	loaded bool
	stamp  string
}

// New loads the folder once; it fails when the files are incomplete or invalid.
func New[T any](dir string, files []string, load func(dir string) (T, error)) (*Store[T], error) {
	s := &Store[T]{dir: dir, files: files, load: load}
	if _, err := s.Reload(); err != nil {
		return nil, err
	}

	return s, nil
}

// Current returns the value in use.
func (s *Store[T]) Current() T {
	s.mu.RLock()
	defer s.mu.RUnlock()

	return s.value
}

// stamp summarizes the files' sizes and modification times.
func (s *Store[T]) fileStamp() string {
	var b strings.Builder

	for _, name := range s.files {
		fi, err := os.Stat(filepath.Join(s.dir, name))
		if err != nil {
			fmt.Fprintf(&b, "%s:missing;", name)

			continue
		}

		fmt.Fprintf(&b, "%s:%d:%d;", name, fi.Size(), fi.ModTime().UnixNano())
	}

	return b.String()
}

// Reload loads the folder again when its files changed and reports whether it took a new
// value; a folder that fails to load keeps the previous value in use.
func (s *Store[T]) Reload() (bool, error) {
	stamp := s.fileStamp()

	s.mu.RLock()
	same := s.loaded && stamp == s.stamp
	s.mu.RUnlock()

	if same {
		return false, nil
	}

	v, err := s.load(s.dir)
	if err != nil {
		return false, err
	}

	s.mu.Lock()
	s.value, s.stamp, s.loaded = v, stamp, true
	s.mu.Unlock()

	return true, nil
}

// Watch reloads every interval until ctx ends; onChange (may be nil) hears each reload and
// each failure.
func (s *Store[T]) Watch(ctx context.Context, interval time.Duration, onChange func(reloaded bool, err error)) {
	t := time.NewTicker(interval)
	defer t.Stop()

	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}

		reloaded, err := s.Reload()
		if onChange != nil && (reloaded || err != nil) {
			onChange(reloaded, err)
		}
	}
}

// Dir is the folder the value is loaded from.
func (s *Store[T]) Dir() string { return s.dir }
