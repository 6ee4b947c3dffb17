package discoveryservice

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/talos-go/talos/internal/atomicfile"
)

// snapshotVersion is written into every snapshot; a file of another version is refused rather
// than half read.
const snapshotVersion = 1

// The snapshot is JSON: it holds only ciphertext and IDs, and JSON keeps it inspectable. Byte
// fields are base64 (encoding/json's form for []byte).
type snapshotFile struct {
	Version  int               `json:"version"`
	Clusters []snapshotCluster `json:"clusters"`
}

type snapshotCluster struct {
	ID         string              `json:"id"`
	Affiliates []snapshotAffiliate `json:"affiliates"`
}

type snapshotAffiliate struct {
	ID        string             `json:"id"`
	Data      []byte             `json:"data,omitempty"`
	Expires   time.Time          `json:"expires"`
	Endpoints []snapshotEndpoint `json:"endpoints,omitempty"`
}

type snapshotEndpoint struct {
	Data    []byte    `json:"data"`
	Expires time.Time `json:"expires"`
}

// export returns the store as a snapshot (under the lock, copying only slice headers: the
// store replaces byte slices, it never writes into them).
func (s *store) export() snapshotFile {
	s.mu.Lock()
	defer s.mu.Unlock()

	out := snapshotFile{Version: snapshotVersion}

	for id, c := range s.clusters {
		if len(c.affiliates) == 0 {
			continue
		}

		sc := snapshotCluster{ID: id, Affiliates: make([]snapshotAffiliate, 0, len(c.affiliates))}

		for aid, a := range c.affiliates {
			sa := snapshotAffiliate{ID: aid, Data: a.data, Expires: a.expires}
			for _, e := range a.endpoints {
				sa.Endpoints = append(sa.Endpoints, snapshotEndpoint{Data: e.data, Expires: e.expires})
			}

			sc.Affiliates = append(sc.Affiliates, sa)
		}

		out.Clusters = append(out.Clusters, sc)
	}

	return out
}

// restore fills an empty store from a snapshot, dropping what expired while the server was
// down. Limits are not applied: everything in it was accepted once.
func (s *store) restore(snap snapshotFile, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()

	for _, sc := range snap.Clusters {
		c := &cluster{affiliates: map[string]*affiliate{}, subs: map[*subscription]struct{}{}}

		for _, sa := range sc.Affiliates {
			if !sa.Expires.After(now) {
				continue
			}

			a := &affiliate{data: sa.Data, expires: sa.Expires}

			for _, e := range sa.Endpoints {
				if e.Expires.After(now) {
					a.endpoints = append(a.endpoints, endpoint{data: e.Data, expires: e.Expires})
				}
			}

			c.affiliates[sa.ID] = a

			if s.next.IsZero() || sa.Expires.Before(s.next) {
				s.next = sa.Expires
			}
		}

		if len(c.affiliates) > 0 {
			s.clusters[sc.ID] = c
			s.populated++
		}
	}
}

// loadSnapshot restores path into the store; a missing file is a first start.
func (s *store) loadSnapshot(path string, now time.Time) error {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}

	if err != nil {
		return fmt.Errorf("reading discovery snapshot: %w", err)
	}

	var snap snapshotFile
	if err = json.Unmarshal(data, &snap); err != nil {
		return fmt.Errorf("discovery snapshot %s is corrupt (%w): move it away to start empty", path, err)
	}

	if snap.Version != snapshotVersion {
		return fmt.Errorf("discovery snapshot %s has version %d, this server reads version %d: move it away to start empty",
			path, snap.Version, snapshotVersion)
	}

	s.restore(snap, now)

	return nil
}

// saveSnapshot writes the store to path atomically, readable by the owner only (the data is
// ciphertext, but cluster IDs and the shape of a cluster are still nobody else's business).
func (s *store) saveSnapshot(path string) error {
	data, err := json.Marshal(s.export())
	if err != nil {
		return fmt.Errorf("encoding discovery snapshot: %w", err)
	}

	return atomicfile.WriteFile(path, data, 0o600)
}
