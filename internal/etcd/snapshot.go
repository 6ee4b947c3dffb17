package etcd

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Snapshot streams a snapshot of this member's database. The stream ends with the SHA-256 of
// the database, as etcd sends it (what `etcdctl snapshot save` writes).
func (m *Manager) Snapshot(ctx context.Context) (io.ReadCloser, error) {
	cli, err := m.LocalClient()
	if err != nil {
		return nil, err
	}

	rc, err := cli.Snapshot(ctx)
	if err != nil {
		cli.Close()

		return nil, fmt.Errorf("%w: taking snapshot: %w", ErrNotRunning, err)
	}

	return &closeBoth{ReadCloser: rc, cli: cli}, nil
}

type closeBoth struct {
	io.ReadCloser
	cli *clientv3.Client
}

func (c *closeBoth) Close() error {
	err := c.ReadCloser.Close()
	c.cli.Close()

	return err
}

// ReceiveSnapshot stores an uploaded snapshot for a later Bootstrap with recovery. It is
// refused on a node that holds etcd data.
func (m *Manager) ReceiveSnapshot(r io.Reader) (int64, error) {
	o, err := m.opts()
	if err != nil {
		return 0, err
	}

	if err := m.checkBootstrap(o); err != nil {
		return 0, err
	}

	if err := os.MkdirAll(filepath.Dir(o.SnapshotPath), 0o700); err != nil {
		return 0, fmt.Errorf("creating snapshot folder: %w", err)
	}

	tmp := o.SnapshotPath + ".part"

	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return 0, fmt.Errorf("storing snapshot: %w", err)
	}

	n, err := io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}

	if err != nil {
		os.Remove(tmp)

		return n, fmt.Errorf("receiving snapshot: %w", err)
	}

	if err := os.Rename(tmp, o.SnapshotPath); err != nil {
		return n, fmt.Errorf("storing snapshot: %w", err)
	}

	return n, nil
}

// verifySnapshot checks the snapshot exists and, unless skipHash, that its trailing SHA-256
// matches its content. A copy of a data folder's db has no hash: it needs skipHash.
func verifySnapshot(path string, skipHash bool) error {
	data, err := os.ReadFile(path)
	if err != nil {
		if os.IsNotExist(err) {
			return ErrNoSnapshot
		}

		return fmt.Errorf("reading snapshot: %w", err)
	}

	if skipHash {
		return nil
	}

	if !hasHash(int64(len(data))) {
		return fmt.Errorf("%w: the snapshot carries no hash (a copy of a data directory needs the skip-hash-check option)", ErrSnapshotHash)
	}

	sum := sha256.Sum256(data[:len(data)-sha256.Size])
	if !bytes.Equal(sum[:], data[len(data)-sha256.Size:]) {
		return fmt.Errorf("%w: SHA-256 mismatch", ErrSnapshotHash)
	}

	return nil
}

// hasHash: a bolt database is a whole number of 512-byte units; a snapshot adds 32 bytes.
func hasHash(size int64) bool { return size%512 == sha256.Size }

// SnapshotKeys reads the live keys of a snapshot (latest revision of each key that is not
// deleted), in key order of their last write.
func SnapshotKeys(path string) ([]*mvccpb.KeyValue, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading snapshot: %w", err)
	}

	if hasHash(int64(len(data))) {
		data = data[:len(data)-sha256.Size]
	}

	tmp, err := os.CreateTemp(filepath.Dir(path), "etcd-snapshot-*.db")
	if err != nil {
		return nil, fmt.Errorf("preparing snapshot: %w", err)
	}

	defer os.Remove(tmp.Name())

	if _, err := tmp.Write(data); err != nil {
		tmp.Close()

		return nil, err
	}

	if err := tmp.Close(); err != nil {
		return nil, err
	}

	db, err := bbolt.Open(tmp.Name(), 0o600, &bbolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("opening snapshot database: %w", err)
	}
	defer db.Close()

	live := map[string]*mvccpb.KeyValue{}

	var order []string

	err = db.View(func(tx *bbolt.Tx) error {
		b := tx.Bucket([]byte("key"))
		if b == nil {
			return fmt.Errorf("snapshot has no key bucket: not an etcd v3 database")
		}

		return b.ForEach(func(rev, v []byte) error {
			// rev: 8-byte main revision, '_', 8-byte sub revision, then 't' for a tombstone.
			if len(rev) < 17 {
				return fmt.Errorf("bad revision key of %d bytes", len(rev))
			}

			_ = binary.BigEndian.Uint64(rev[:8])

			kv := &mvccpb.KeyValue{}
			if err := kv.Unmarshal(v); err != nil {
				return fmt.Errorf("decoding key-value: %w", err)
			}

			k := string(kv.Key)

			if len(rev) > 17 && rev[17] == 't' {
				delete(live, k)

				return nil
			}

			if _, ok := live[k]; !ok {
				order = append(order, k)
			}

			live[k] = kv

			return nil
		})
	})
	if err != nil {
		return nil, err
	}

	out := make([]*mvccpb.KeyValue, 0, len(live))

	for _, k := range order {
		if kv, ok := live[k]; ok {
			out = append(out, kv)
			delete(live, k) // a key re-created after deletion appears once
		}
	}

	return out, nil
}

// importSnapshot writes the uploaded snapshot's keys into the freshly bootstrapped cluster and
// removes the snapshot. Keys keep their values; revisions and leases start anew.
func (m *Manager) importSnapshot(ctx context.Context, o Options) error {
	kvs, err := SnapshotKeys(o.SnapshotPath)
	if err != nil {
		return err
	}

	cli, err := m.client(o, o.clientURL())
	if err != nil {
		return err
	}
	defer cli.Close()

	const batch = 64

	for i := 0; i < len(kvs); i += batch {
		end := min(i+batch, len(kvs))

		ops := make([]clientv3.Op, 0, end-i)
		for _, kv := range kvs[i:end] {
			ops = append(ops, clientv3.OpPut(string(kv.Key), string(kv.Value)))
		}

		tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := cli.Txn(tctx).Then(ops...).Commit()

		cancel()

		if err != nil {
			return fmt.Errorf("writing recovered keys: %w", err)
		}
	}

	o.Log.Info("etcd: recovered keys from snapshot", zap.Int("keys", len(kvs)))

	if err := os.Remove(o.SnapshotPath); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("removing used snapshot: %w", err)
	}

	return nil
}
