package upgrade

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// EtcdGuard is what an upgrade or reset of a control plane needs from etcd. machined sets it
// on control planes once its etcd service runs (see ClusterGuard for an implementation over an
// etcd client).
type EtcdGuard interface {
	// Lock takes the cluster-wide upgrade lock, waiting while another control plane holds it.
	// The lock is held until unlock is called or this process ends (its lease then expires).
	Lock(ctx context.Context, owner string) (unlock func(), err error)
	// CheckHealthyWithout returns nil when every member is healthy and the cluster keeps a
	// quorum of healthy voting members without this node's member.
	CheckHealthyWithout(ctx context.Context) error
	// Leave removes this node's member from the cluster, stops etcd and wipes its data.
	Leave(ctx context.Context) error
	// MarkRejoining records that node leaves etcd for an upgrade and will rejoin after it;
	// Rejoined removes the record; Rejoining lists the nodes recorded.
	MarkRejoining(ctx context.Context, node string) error
	Rejoined(ctx context.Context, node string) error
	Rejoining(ctx context.Context) ([]string, error)
}

// RejoinKey prefixes the records of control planes that left etcd for an upgrade without
// --preserve and have not rejoined yet. They carry no lease: they outlive the upgrade lock and
// the upgrading process, so the next control plane waits until the cluster has its member back.
const RejoinKey = "/talos-go/upgrade-rejoin/"

// ErrLastMember means this node is the only voting etcd member: an upgrade with --preserve
// may go on (the data stays), one without it would lose the cluster's data.
var ErrLastMember = errors.New("this node is the only etcd voting member: without --preserve its data would be lost; upgrade with --preserve or add control planes first")

// LockKey is the etcd key prefix of the upgrade lock.
const LockKey = "/talos-go/upgrade-lock"

// LockTTL is the lease of the upgrade lock: after a control plane reboots into its new version
// its lock lapses within this time.
const LockTTL = 15 * time.Second

// EtcdNode is the part of the etcd service manager (internal/etcd.Manager) the guard uses.
type EtcdNode interface {
	// ClusterClient is a client to all members.
	ClusterClient(ctx context.Context) (*clientv3.Client, error)
	// Status is this node's member status.
	Status(ctx context.Context) (*clientv3.StatusResponse, error)
	// Leave removes this member; stop must stop the etcd service.
	Leave(ctx context.Context, stop func(ctx context.Context) error) error
}

// ClusterGuard implements EtcdGuard over the node's etcd.
type ClusterGuard struct {
	Etcd EtcdNode
	// StopEtcd stops the local etcd service (used by Leave).
	StopEtcd func(ctx context.Context) error
	// TTL is the lock's lease (default LockTTL).
	TTL time.Duration
}

// Lock implements EtcdGuard with an etcd mutex on a session lease.
func (g *ClusterGuard) Lock(ctx context.Context, owner string) (func(), error) {
	cli, err := g.Etcd.ClusterClient(ctx)
	if err != nil {
		return nil, fmt.Errorf("etcd client for the upgrade lock: %w", err)
	}

	ttl := g.TTL
	if ttl <= 0 {
		ttl = LockTTL
	}

	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(max(1, int(ttl/time.Second))), concurrency.WithContext(context.Background()))
	if err != nil {
		cli.Close()

		return nil, fmt.Errorf("etcd session for the upgrade lock: %w", err)
	}

	mu := concurrency.NewMutex(sess, LockKey)
	if err = mu.Lock(ctx); err != nil {
		sess.Close()
		cli.Close()

		return nil, fmt.Errorf("taking the etcd upgrade lock (another control plane may be upgrading): %w", err)
	}

	// Record who holds it, for humans.
	cli.Put(ctx, LockKey+"-owner", owner, clientv3.WithLease(sess.Lease())) //nolint:errcheck // the owner name is informational; the lock holds without it

	return func() {
		uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()

		mu.Unlock(uctx) //nolint:errcheck // the session's lease ends the lock anyway
		sess.Close()
		cli.Close()
	}, nil
}

// CheckHealthyWithout implements EtcdGuard.
func (g *ClusterGuard) CheckHealthyWithout(ctx context.Context) error {
	st, err := g.Etcd.Status(ctx)
	if err != nil {
		return fmt.Errorf("etcd on this node is not healthy: %w", err)
	}

	self := st.Header.MemberId

	cli, err := g.Etcd.ClusterClient(ctx)
	if err != nil {
		return err
	}
	defer cli.Close()

	return QuorumWithout(ctx, cli, self)
}

// QuorumWithout checks through cli that all members answer and that the voting members other
// than self are a healthy quorum on their own.
func QuorumWithout(ctx context.Context, cli *clientv3.Client, self uint64) error {
	resp, err := cli.MemberList(ctx)
	if err != nil {
		return fmt.Errorf("listing etcd members: %w", err)
	}

	voters, healthy := 0, 0

	var unhealthy []string

	for _, mem := range resp.Members {
		ok := false

		if len(mem.ClientURLs) > 0 {
			sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			st, err := cli.Status(sctx, mem.ClientURLs[0])
			cancel()

			ok = err == nil && st.Leader != 0 && len(st.Errors) == 0
		}

		if !ok {
			unhealthy = append(unhealthy, mem.Name)
		}

		if mem.IsLearner || mem.ID == self {
			continue
		}

		voters++

		if ok {
			healthy++
		}
	}

	if len(unhealthy) > 0 {
		return fmt.Errorf("etcd members %v are not healthy: wait for them before upgrading a control plane", unhealthy)
	}

	if voters == 0 {
		return ErrLastMember
	}

	if need := voters/2 + 1; healthy < need {
		return fmt.Errorf("without this node %d of %d etcd voting members are healthy, %d needed", healthy, voters, need)
	}

	return nil
}

// Leave implements EtcdGuard.
func (g *ClusterGuard) Leave(ctx context.Context) error {
	return g.Etcd.Leave(ctx, g.StopEtcd)
}

// MarkRejoining implements EtcdGuard.
func (g *ClusterGuard) MarkRejoining(ctx context.Context, node string) error {
	return g.withClient(ctx, func(cli *clientv3.Client) error {
		_, err := cli.Put(ctx, RejoinKey+node, time.Now().UTC().Format(time.RFC3339))

		return err
	})
}

// Rejoined implements EtcdGuard.
func (g *ClusterGuard) Rejoined(ctx context.Context, node string) error {
	return g.withClient(ctx, func(cli *clientv3.Client) error {
		_, err := cli.Delete(ctx, RejoinKey+node)

		return err
	})
}

// Rejoining implements EtcdGuard.
func (g *ClusterGuard) Rejoining(ctx context.Context) ([]string, error) {
	var nodes []string

	err := g.withClient(ctx, func(cli *clientv3.Client) error {
		resp, err := cli.Get(ctx, RejoinKey, clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			return err
		}

		for _, kv := range resp.Kvs {
			nodes = append(nodes, strings.TrimPrefix(string(kv.Key), RejoinKey))
		}

		return nil
	})

	return nodes, err
}

func (g *ClusterGuard) withClient(ctx context.Context, fn func(*clientv3.Client) error) error {
	cli, err := g.Etcd.ClusterClient(ctx)
	if err != nil {
		return fmt.Errorf("etcd client: %w", err)
	}
	defer cli.Close()

	return fn(cli)
}
