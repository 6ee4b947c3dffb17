package trustd

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/talos-go/talos/internal/atomicfile"
)

// Join by approval (docs/join-approval.md): a node without the token sends its CSR alone; trustd
// records the request under the fingerprint of its public key and signs only once an admin has
// approved that key. Requests live in a folder of their own on the STATE partition (durable,
// unlike trustd's secrets folder): trustd writes <id>.json (who asked, when), machined writes <id>.decision (approved or denied), so the
// two processes never write the same file.

// JoinsDir is the folder of join requests in the STATE folder.
const JoinsDir = "joins"

// Limits of the join request folder: it is written on behalf of unauthenticated callers.
const (
	MaxPendingJoins = 64             // pending requests at once; a new key beyond is refused
	MaxJoins        = 1024           // request records of any state
	JoinPendingTTL  = 24 * time.Hour // a pending request unseen this long is dropped
	maxJoinAddrs    = 4              // addresses remembered per request, the latest
	maxJoinNames    = 16             // names remembered per request
	maxJoinName     = 253            // bytes of each name remembered
)

// JoinState is an approval decision.
type JoinState string

// Join states.
const (
	JoinPending  JoinState = "pending"
	JoinApproved JoinState = "approved"
	JoinDenied   JoinState = "denied"
)

// ErrTooManyJoins refuses a new join request when the folder is full.
var ErrTooManyJoins = fmt.Errorf("too many pending join requests (at most %d): approve or deny some with talosctl join approve|deny <id>, or wait %v for unseen ones to be dropped", MaxPendingJoins, JoinPendingTTL)

// JoinRequest is one node key asking to join.
type JoinRequest struct {
	ID        string    `json:"id"`
	Addresses []string  `json:"addresses"` // the requester's source addresses, latest last
	Names     []string  `json:"names"`     // the CSR's common name, IPs and DNS names
	FirstSeen time.Time `json:"firstSeen"`
	LastSeen  time.Time `json:"lastSeen"`
	State     JoinState `json:"-"` // from the decision file
}

var joinIDPattern = regexp.MustCompile(`^[0-9a-f]{16}$`)

// JoinID is a request's id: the first 16 hex digits of the SHA-256 of the CSR's public key.
// The CSR's signature proves its sender holds that key, so the id names the key, not a claim.
func JoinID(csr *x509.CertificateRequest) string {
	sum := sha256.Sum256(csr.RawSubjectPublicKeyInfo)

	return hex.EncodeToString(sum[:8])
}

// CheckJoinID refuses anything but a join request id.
func CheckJoinID(id string) error {
	if !joinIDPattern.MatchString(id) {
		return fmt.Errorf("join request id %q is not valid: want the 16 hex digits shown by talosctl get joinrequests", id)
	}

	return nil
}

// CSRNames lists the names a CSR asks for: its common name, then IP and DNS names.
func CSRNames(csr *x509.CertificateRequest) []string {
	var names []string

	if csr.Subject.CommonName != "" {
		names = append(names, csr.Subject.CommonName)
	}

	for _, ip := range csr.IPAddresses {
		names = append(names, ip.String())
	}

	names = append(names, csr.DNSNames...)
	names = names[:min(len(names), maxJoinNames)]

	// A DNS name is at most 253 bytes; anything longer is cut, so a record stays small.
	for i, n := range names {
		names[i] = n[:min(len(n), maxJoinName)]
	}

	return names
}

// Joins is the join request folder.
type Joins struct {
	Dir string

	mu sync.Mutex
}

func (j *Joins) requestPath(id string) string  { return filepath.Join(j.Dir, id+".json") }
func (j *Joins) decisionPath(id string) string { return filepath.Join(j.Dir, id+".decision") }

// Decision returns the decision on a key: pending when none was made.
func (j *Joins) Decision(id string) (JoinState, error) {
	data, err := os.ReadFile(j.decisionPath(id))
	if errors.Is(err, os.ErrNotExist) {
		return JoinPending, nil
	}

	if err != nil {
		return "", err
	}

	switch s := JoinState(strings.TrimSpace(string(data))); s {
	case JoinApproved, JoinDenied:
		return s, nil
	default:
		return "", fmt.Errorf("decision for %s: unknown state %q", id, s)
	}
}

// Decide records an admin's decision on a key (machined's side).
func (j *Joins) Decide(id string, s JoinState) error {
	if err := CheckJoinID(id); err != nil {
		return err
	}

	if s != JoinApproved && s != JoinDenied {
		return fmt.Errorf("decision %q: want approved or denied", s)
	}

	if err := os.MkdirAll(j.Dir, 0o700); err != nil {
		return err
	}

	return atomicfile.WriteFile(j.decisionPath(id), []byte(s+"\n"), 0o600)
}

// Seen records that a node asked with this key from addr, and returns the decision on it and
// whether the key is new. A new key is refused with ErrTooManyJoins when the folder is full.
func (j *Joins) Seen(id, addr string, names []string, now time.Time) (JoinState, bool, error) {
	if err := CheckJoinID(id); err != nil {
		return "", false, err
	}

	j.mu.Lock()
	defer j.mu.Unlock()

	state, err := j.Decision(id)
	if err != nil {
		return "", false, err
	}

	req, err := j.read(id)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", false, err
	}

	isNew := req == nil

	if isNew {
		if err = j.prune(now); err != nil {
			return "", false, err
		}

		all, err := j.list()
		if err != nil {
			return "", false, err
		}

		pending := 0

		for _, r := range all {
			if r.State == JoinPending {
				pending++
			}
		}

		if len(all) >= MaxJoins || (state == JoinPending && pending >= MaxPendingJoins) {
			return "", false, ErrTooManyJoins
		}

		req = &JoinRequest{ID: id, FirstSeen: now}
	}

	req.LastSeen = now
	req.Names = names

	if i := slices.Index(req.Addresses, addr); i >= 0 {
		req.Addresses = slices.Delete(req.Addresses, i, i+1)
	}

	req.Addresses = append(req.Addresses, addr)
	req.Addresses = req.Addresses[max(0, len(req.Addresses)-maxJoinAddrs):]

	data, err := json.Marshal(req)
	if err != nil {
		return "", false, err
	}

	if err = os.MkdirAll(j.Dir, 0o700); err != nil {
		return "", false, err
	}

	if err = atomicfile.WriteFile(j.requestPath(id), data, 0o600); err != nil {
		return "", false, err
	}

	return state, isNew, nil
}

func (j *Joins) read(id string) (*JoinRequest, error) {
	data, err := os.ReadFile(j.requestPath(id))
	if err != nil {
		return nil, err
	}

	var req JoinRequest
	if err = json.Unmarshal(data, &req); err != nil {
		return nil, fmt.Errorf("%s: %w", j.requestPath(id), err)
	}

	req.ID = id

	if req.State, err = j.Decision(id); err != nil {
		return nil, err
	}

	return &req, nil
}

// List returns every request, with its decision, sorted by id. Decisions made for keys that have
// not asked yet are listed too, with no addresses.
func (j *Joins) List() ([]JoinRequest, error) {
	j.mu.Lock()
	defer j.mu.Unlock()

	return j.list()
}

func (j *Joins) list() ([]JoinRequest, error) {
	entries, err := os.ReadDir(j.Dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}

	if err != nil {
		return nil, err
	}

	seen := map[string]bool{}

	var out []JoinRequest

	for _, e := range entries {
		id, ext, ok := strings.Cut(e.Name(), ".")
		if !ok || CheckJoinID(id) != nil || seen[id] || (ext != "json" && ext != "decision") {
			continue
		}

		seen[id] = true

		req, err := j.read(id)

		switch {
		case errors.Is(err, os.ErrNotExist):
			state, derr := j.Decision(id)
			if derr != nil {
				return nil, derr
			}

			req = &JoinRequest{ID: id, State: state}
		case err != nil:
			return nil, err
		}

		out = append(out, *req)
	}

	slices.SortFunc(out, func(a, b JoinRequest) int { return strings.Compare(a.ID, b.ID) })

	return out, nil
}

// Prune drops pending requests unseen for JoinPendingTTL. Decided keys stay: an approved node
// renews without asking again, a denied one stays denied.
func (j *Joins) Prune(now time.Time) error {
	j.mu.Lock()
	defer j.mu.Unlock()

	return j.prune(now)
}

func (j *Joins) prune(now time.Time) error {
	all, err := j.list()
	if err != nil {
		return err
	}

	for _, r := range all {
		if r.State == JoinPending && now.Sub(r.LastSeen) > JoinPendingTTL {
			if err = atomicfile.Remove(j.requestPath(r.ID)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
	}

	return nil
}
