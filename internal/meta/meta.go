// Package meta is the node's META partition: a small key-value store for what the boot loader
// and machined tell each other across reboots (active slot, boot-once, upgrade state).
//
// On an installed metal node it is the raw META partition (partition.go). Otherwise it is one
// file, META/meta, holding "key=value" lines. Every change writes a new file next to it, syncs it
// and renames it over the old one, so a crash leaves either the old or the new contents, never a
// mix. A process lock (flock on META/.lock, or on the partition) serializes read-modify-write
// cycles between the boot stage and machined.
package meta

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/talos-go/talos/internal/atomicfile"
)

// Well-known keys.
const (
	// ActiveSlot is the slot the node boots from by default: "A" or "B".
	ActiveSlot = "boot.active"
	// BootOnce is the slot to try on the next boot only; the boot stage clears it as it starts
	// the slot and records the try in TrialSlot.
	BootOnce = "boot.once"
	// TrialSlot is the slot being tried; machined clears it (making it active) once the node
	// has booted healthily. If it is still set on the next boot, the try failed.
	TrialSlot = "boot.trial"
	// LastBoot records how the last boot went, for humans and tests: e.g. "A", "B (trial)",
	// "A (fallback: B did not report a successful boot)".
	LastBoot = "boot.last"
	// Fallback says why the last try was abandoned (empty after a successful upgrade).
	Fallback = "boot.fallback"
	// WipeEphemeral asks the boot stage to wipe EPHEMERAL before starting the trial slot
	// (staged upgrade of a worker without --preserve).
	WipeEphemeral = "upgrade.wipe-ephemeral"
	// ResetWipe lists (comma-separated) the partitions a reset has begun to wipe: set before
	// the reset leaves etcd, cleared once the wipe is done. A machined that dies in between
	// leaves it set, and the boot stage finishes the wipe on the next boot: a node that left
	// etcd must not start again on its old etcd data (etcd refuses a removed member's data).
	ResetWipe = "reset.wipe"
	// UpgradeFrom and UpgradeTo are the versions of the upgrade in progress or last done.
	UpgradeFrom = "upgrade.from"
	UpgradeTo   = "upgrade.to"
	// StateEncryption is STATE's encryption (internal/encryption's Spec as JSON): the boot stage
	// opens STATE with it before the config on STATE can be read.
	StateEncryption = "state.encryption"
)

const fileName = "meta"

// TalosKeyPrefix marks the Talos META keys (tags 0x00-0xff, as upstream's META partition numbers
// them; `talosctl meta write`, a schematic's meta values) in this string-keyed store, next to the
// boot loader's own keys. Their values are base64: they are bytes and may hold newlines.
const TalosKeyPrefix = "talos.0x"

// TalosKey is where the Talos META key tag lives in the store.
func TalosKey(tag uint8) string { return fmt.Sprintf(TalosKeyPrefix+"%02x", tag) }

// TalosValue is a Talos META key's value as the store holds it.
func TalosValue(value []byte) string { return base64.StdEncoding.EncodeToString(value) }

// Store is the META key-value store: in a folder, or on a metal node's META partition.
type Store struct {
	dir string
	dev string // the partition (or a file standing for one), when the store is on one
}

// Open returns the store at path: on the partition when path is a block device (an installed
// metal node's /system/meta), else in the folder path, created if needed.
func Open(path string) (*Store, error) {
	if fi, err := os.Stat(path); err == nil && fi.Mode()&os.ModeDevice != 0 {
		return OpenPartition(path), nil
	}

	dir := path
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating META folder %s: %w", dir, err)
	}

	return &Store{dir: dir}, nil
}

// OpenPartition returns the store on a partition (or a file of the partition's size).
func OpenPartition(dev string) *Store { return &Store{dev: dev} }

// Path is the store's file, or its partition.
func (s *Store) Path() string {
	if s.dev != "" {
		return s.dev
	}

	return filepath.Join(s.dir, fileName)
}

// Values is a snapshot of the store.
type Values map[string]string

// Get returns one value ("" when unset).
func (s *Store) Get(key string) (string, error) {
	v, err := s.Read()
	if err != nil {
		return "", err
	}

	return v[key], nil
}

// Read returns all values.
func (s *Store) Read() (Values, error) {
	unlock, err := s.lock(unix.LOCK_SH)
	if err != nil {
		return nil, err
	}
	defer unlock()

	return s.readLocked()
}

// Update runs fn on the current values under the lock and saves what fn leaves (a key set to
// "" is removed). If fn fails nothing is written.
func (s *Store) Update(fn func(v Values) error) error {
	unlock, err := s.lock(unix.LOCK_EX)
	if err != nil {
		return err
	}
	defer unlock()

	v, err := s.readLocked()
	if err != nil {
		return err
	}

	if err = fn(v); err != nil {
		return err
	}

	return s.writeLocked(v)
}

// Set sets keys and values given as pairs: Set("a", "1", "b", "") sets a and removes b.
func (s *Store) Set(kv ...string) error {
	if len(kv)%2 != 0 {
		return errors.New("meta: Set needs key, value pairs")
	}

	return s.Update(func(v Values) error {
		for i := 0; i < len(kv); i += 2 {
			v[kv[i]] = kv[i+1]
		}

		return nil
	})
}

func (s *Store) lock(how int) (func(), error) {
	lockPath := filepath.Join(s.dir, ".lock")
	if s.dev != "" {
		lockPath = s.dev // the partition itself: only this machine's processes use it
	}

	f, err := os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening META lock: %w", err)
	}

	if err = unix.Flock(int(f.Fd()), how); err != nil {
		f.Close()

		return nil, fmt.Errorf("locking META: %w", err)
	}

	return func() { f.Close() }, nil
}

func (s *Store) readLocked() (Values, error) {
	if s.dev != "" {
		f, err := os.Open(s.dev)
		if err != nil {
			return nil, fmt.Errorf("opening META %s: %w", s.dev, err)
		}
		defer f.Close()

		return s.readPartitionLocked(f)
	}

	data, err := os.ReadFile(s.Path())
	if errors.Is(err, os.ErrNotExist) {
		return Values{}, nil
	}

	if err != nil {
		return nil, fmt.Errorf("reading META %s: %w", s.Path(), err)
	}

	return Parse(data)
}

// Parse reads "key=value" lines.
func Parse(data []byte) (Values, error) {
	v := Values{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	// The whole file is in memory already: a line may be as long as the file (the scanner's
	// default 64 KiB limit made a long value unreadable, found by FuzzParse).
	sc.Buffer(nil, len(data)+1)

	for line := 1; sc.Scan(); line++ {
		text := sc.Text()
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}

		key, value, ok := strings.Cut(text, "=")
		if !ok || key == "" {
			return nil, fmt.Errorf("META line %d %q is not key=value: the file is damaged; remove it to start over with default slot A", line, text)
		}

		// A line's CR is its CRLF ending: the scanner drops one, and a value never ends in
		// one (writeLocked refuses it), so what is read is what the next write keeps.
		v[key] = strings.TrimRight(value, "\r")
	}

	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading META: %w", err)
	}

	return v, nil
}

func (s *Store) writeLocked(v Values) error {
	keys := make([]string, 0, len(v))

	for k, val := range v {
		if strings.ContainsAny(k, "=\n") || strings.Contains(val, "\n") || strings.HasSuffix(val, "\r") {
			return fmt.Errorf("META key %q or its value contains '=' or a newline, or the value ends in a carriage return: such values cannot be stored", k)
		}

		if val != "" {
			keys = append(keys, k)
		}
	}

	sort.Strings(keys)

	var buf bytes.Buffer
	for _, k := range keys {
		fmt.Fprintf(&buf, "%s=%s\n", k, v[k])
	}

	if s.dev != "" {
		f, err := os.OpenFile(s.dev, os.O_RDWR, 0)
		if err != nil {
			return fmt.Errorf("opening META %s: %w", s.dev, err)
		}
		defer f.Close()

		return s.writePartitionLocked(f, buf.Bytes())
	}

	return atomicfile.WriteFile(s.Path(), buf.Bytes(), 0o600)
}
