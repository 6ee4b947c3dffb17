package etcd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Member is one cluster member.
type Member struct {
	ID         uint64
	Name       string
	PeerURLs   []string
	ClientURLs []string
	IsLearner  bool
}

func toMembers(in []*etcdserverpb.Member) []Member {
	out := make([]Member, 0, len(in))
	for _, m := range in {
		out = append(out, Member{ID: m.ID, Name: m.Name, PeerURLs: m.PeerURLs, ClientURLs: m.ClientURLs, IsLearner: m.IsLearner})
	}

	return out
}

// Members lists the cluster's members. With local, the list is this member's view
// (serializable); otherwise it is read through quorum.
func (m *Manager) Members(ctx context.Context, local bool) ([]Member, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()

	o, err := m.opts()
	if err != nil {
		return nil, err
	}

	var cli *clientv3.Client

	if local {
		cli, err = m.client(o, o.clientURL())
	} else {
		cli, err = m.clusterClient(ctx, o)
	}

	if err != nil {
		return nil, err
	}
	defer cli.Close()

	var opts []clientv3.OpOption
	if local {
		opts = append(opts, clientv3.WithSerializable())
	}

	resp, err := cli.MemberList(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("listing etcd members: %w", err)
	}

	return toMembers(resp.Members), nil
}

// Status is this member's status.
func (m *Manager) Status(ctx context.Context) (*clientv3.StatusResponse, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()

	o, err := m.opts()
	if err != nil {
		return nil, err
	}

	cli, err := m.client(o, o.clientURL())
	if err != nil {
		return nil, err
	}
	defer cli.Close()

	st, err := cli.Status(ctx, o.clientURL())
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotRunning, err)
	}

	return st, nil
}

// quorumCheck verifies that removing member id keeps a quorum of healthy voting members. It
// returns the member list it looked at.
func (m *Manager) quorumCheck(ctx context.Context, o Options, cli *clientv3.Client, id uint64) ([]Member, error) {
	// This member's own view: it answers even when the cluster has lost quorum.
	local, err := m.client(o, o.clientURL())
	if err != nil {
		return nil, err
	}
	defer local.Close()

	resp, err := local.MemberList(ctx, clientv3.WithSerializable())
	if err != nil {
		resp, err = cli.MemberList(ctx)
	}

	if err != nil {
		return nil, fmt.Errorf("listing etcd members: %w", err)
	}

	members := toMembers(resp.Members)

	var target *Member

	for i := range members {
		if members[i].ID == id {
			target = &members[i]
		}
	}

	if target == nil {
		return members, fmt.Errorf("%w: member %x is not in the cluster", ErrNotMember, id)
	}

	if target.IsLearner {
		return members, nil // learners do not vote
	}

	voters, healthy := 0, 0

	for _, mem := range members {
		if mem.IsLearner || mem.ID == id {
			continue
		}

		voters++

		if m.memberHealthy(ctx, o, mem) {
			healthy++
		}
	}

	if voters == 0 {
		return members, fmt.Errorf("%w: member %x is the last voting member", ErrQuorum, id)
	}

	need := voters/2 + 1
	if healthy < need {
		return members, fmt.Errorf("%w: after removing member %x, %d of %d remaining voting members are healthy, %d needed",
			ErrQuorum, id, healthy, voters, need)
	}

	return members, nil
}

func (m *Manager) memberHealthy(ctx context.Context, o Options, mem Member) bool {
	if len(mem.ClientURLs) == 0 {
		return false
	}

	cli, err := m.client(o, mem.ClientURLs...)
	if err != nil {
		return false
	}
	defer cli.Close()

	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()

	st, err := cli.Status(sctx, mem.ClientURLs[0])

	return err == nil && st.Leader != 0 && len(st.Errors) == 0
}

// Leave removes this node from the cluster: it refuses if that would lose quorum, hands over
// leadership if it leads, removes its member, then calls stop (which must stop the etcd
// service) and wipes the data folder. The node stays out (the service waits) until Reset.
func (m *Manager) Leave(ctx context.Context, stop func(ctx context.Context) error) error {
	ctx, cancel := bounded(ctx)
	defer cancel()

	o, err := m.opts()
	if err != nil {
		return err
	}

	st, err := m.Status(ctx)
	if err != nil {
		return err
	}

	self := st.Header.MemberId

	cli, err := m.clusterClient(ctx, o)
	if err != nil {
		return err
	}
	defer cli.Close()

	members, err := m.quorumCheck(ctx, o, cli, self)
	if err != nil {
		return err
	}

	if st.Leader == self {
		if _, err := m.forfeit(ctx, o, members, self); err != nil {
			return fmt.Errorf("handing over leadership before leaving: %w", err)
		}
	}

	m.mu.Lock()
	m.left = true
	m.mu.Unlock()

	if err := removeWithRetry(ctx, cli, self); err != nil {
		m.mu.Lock()
		m.left = false
		m.mu.Unlock()

		return fmt.Errorf("removing this member (%x): %w", self, err)
	}

	o.Log.Info("etcd: left the cluster", zap.String("member", fmt.Sprintf("%x", self)))

	if stop != nil {
		if err := stop(ctx); err != nil {
			return fmt.Errorf("stopping etcd after leaving: %w", err)
		}
	}

	if err := os.RemoveAll(o.DataDir); err != nil {
		return fmt.Errorf("wiping etcd data after leaving: %w", err)
	}

	return nil
}

// Reset lets a node that left the cluster start (join) again; its data folder must be empty.
func (m *Manager) Reset() {
	m.mu.Lock()
	m.left = false
	m.taken = nil
	m.joined = false
	m.bootstrap = nil
	m.mu.Unlock()

	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// RemoveMember removes another member by ID, refusing this node's own member (use Leave) and
// a removal that would lose quorum.
func (m *Manager) RemoveMember(ctx context.Context, id uint64) error {
	ctx, cancel := bounded(ctx)
	defer cancel()

	o, err := m.opts()
	if err != nil {
		return err
	}

	if st, err := m.Status(ctx); err == nil && st.Header.MemberId == id {
		return fmt.Errorf("%w: member %x is this node; use leave instead", ErrInvalid, id)
	}

	cli, err := m.clusterClient(ctx, o)
	if err != nil {
		return err
	}
	defer cli.Close()

	if _, err := m.quorumCheck(ctx, o, cli, id); err != nil {
		return err
	}

	if err := removeWithRetry(ctx, cli, id); err != nil {
		return fmt.Errorf("removing member %x: %w", id, err)
	}

	return nil
}

// ForfeitLeadership hands leadership to another healthy voting member if this one leads. It
// returns the name of the new leader, or "" when this member was not the leader.
func (m *Manager) ForfeitLeadership(ctx context.Context) (string, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()

	o, err := m.opts()
	if err != nil {
		return "", err
	}

	st, err := m.Status(ctx)
	if err != nil {
		return "", err
	}

	if st.Leader != st.Header.MemberId {
		return "", nil
	}

	members, err := m.Members(ctx, true)
	if err != nil {
		return "", err
	}

	return m.forfeit(ctx, o, members, st.Header.MemberId)
}

func (m *Manager) forfeit(ctx context.Context, o Options, members []Member, self uint64) (string, error) {
	for _, mem := range members {
		if mem.ID == self || mem.IsLearner || mem.Name == "" || !m.memberHealthy(ctx, o, mem) {
			continue
		}

		// MoveLeader must be sent to the leader: this member.
		cli, err := m.client(o, o.clientURL())
		if err != nil {
			return "", err
		}

		_, err = cli.MoveLeader(ctx, mem.ID)
		cli.Close()

		if err != nil {
			return "", fmt.Errorf("moving leadership to %s: %w", mem.Name, err)
		}

		return mem.Name, nil
	}

	return "", fmt.Errorf("%w: no other healthy voting member to take leadership", ErrQuorum)
}

// AlarmList lists the cluster's alarms.
func (m *Manager) AlarmList(ctx context.Context) ([]*etcdserverpb.AlarmMember, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()

	cli, err := m.LocalClient()
	if err != nil {
		return nil, err
	}
	defer cli.Close()

	resp, err := cli.AlarmList(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing etcd alarms: %w", err)
	}

	return resp.Alarms, nil
}

// AlarmDisarm disarms every alarm and returns those it disarmed.
func (m *Manager) AlarmDisarm(ctx context.Context) ([]*etcdserverpb.AlarmMember, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()

	cli, err := m.LocalClient()
	if err != nil {
		return nil, err
	}
	defer cli.Close()

	resp, err := cli.AlarmDisarm(ctx, &clientv3.AlarmMember{})
	if err != nil {
		return nil, fmt.Errorf("disarming etcd alarms: %w", err)
	}

	return resp.Alarms, nil
}

// Defragment defragments this member's database.
func (m *Manager) Defragment(ctx context.Context) error {
	ctx, cancel := bounded(ctx)
	defer cancel()

	o, err := m.opts()
	if err != nil {
		return err
	}

	cli, err := m.client(o, o.clientURL())
	if err != nil {
		return err
	}
	defer cli.Close()

	if _, err := cli.Defragment(ctx, o.clientURL()); err != nil {
		return fmt.Errorf("defragmenting etcd: %w", err)
	}

	return nil
}

// removeWithRetry removes a member, retrying while etcd refuses because a peer connected only
// recently (etcd counts a member active after a few seconds of connection).
func removeWithRetry(ctx context.Context, cli *clientv3.Client, id uint64) error {
	for {
		_, err := cli.MemberRemove(ctx, id)
		if err == nil || errors.Is(err, rpctypes.ErrMemberNotFound) {
			return nil // not found: an earlier attempt that reported an error went through
		}

		// Removing the member that served the call stops it before it answers: the removal
		// went through if the others no longer list it.
		if removed(ctx, cli, id) {
			return nil
		}

		if !errors.Is(err, rpctypes.ErrUnhealthy) && !strings.Contains(err.Error(), "unhealthy cluster") &&
			!strings.Contains(err.Error(), "server stopped") {
			return err
		}

		select {
		case <-ctx.Done():
			return err
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// removed reports whether the cluster's other members no longer list id.
func removed(ctx context.Context, cli *clientv3.Client, id uint64) bool {
	for range 5 {
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := cli.MemberList(lctx)
		cancel()

		if err == nil {
			for _, m := range resp.Members {
				if m.ID == id {
					return false
				}
			}

			return true
		}

		select {
		case <-ctx.Done():
			return false
		case <-time.After(200 * time.Millisecond):
		}
	}

	return false
}
