package etcd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/talos-go/talos/internal/machined/system"
	"github.com/talos-go/talos/internal/machined/system/runner"
	"github.com/talos-go/talos/internal/pki"
	"github.com/talos-go/talos/internal/sandbox"
)

// Runner returns a supervisor runner for one run of the etcd service.
func (m *Manager) Runner() system.Runner { return &etcdRunner{m: m} }

type etcdRunner struct{ m *Manager }

func (r *etcdRunner) String() string                { return "etcd(" + r.m.Phase() + ")" }
func (r *etcdRunner) Run(ctx context.Context) error { return r.m.Run(ctx) }

// Run writes the certificates, waits until etcd may start (data, bootstrap or a cluster to
// join), runs etcd until ctx ends or it exits, and meanwhile promotes this member if it is a
// learner and imports a recovery snapshot if asked to.
func (m *Manager) Run(ctx context.Context) error {
	o, err := m.opts()
	if err != nil {
		return err
	}

	ca, err := pki.ParseCA(o.CACert, o.CAKey)
	if err != nil {
		return fmt.Errorf("etcd CA: %w", err)
	}

	// The certificates name every address etcd is reached at.
	var ips []net.IP
	if ip := net.ParseIP(o.Address); ip != nil {
		ips = append(ips, ip)
	}

	for _, a := range slices.Concat(o.endpoints.Advertise, o.endpoints.ListenClient) {
		if ip := net.IP(a.AsSlice()); !slices.ContainsFunc(ips, ip.Equal) {
			ips = append(ips, ip)
		}
	}

	certs, err := WriteCertificates(ca, o.SecretsDir, CertRequest{Name: o.Name, IPs: ips})
	if err != nil {
		return err
	}

	p, err := m.prepare(ctx, o)
	if err != nil {
		return err
	}

	args, err := Args(ArgsInput{
		Binary:         o.Binary,
		Name:           o.Name,
		Address:        o.Address,
		ClientPort:     o.ClientPort,
		PeerPort:       o.PeerPort,
		ListenLoopback: o.ListenLoopback,
		DataDir:        o.DataDir,
		Certs:          certs,
		InitialCluster: p.initialCluster,
		State:          p.state,
		ClusterToken:   o.ClusterToken,
		ExtraArgs:      o.ExtraArgs,
		Endpoints:      &o.endpoints,
	})
	if err != nil {
		return err
	}

	// etcd reaches its data folder and certificates, nothing else of the node.
	if err = os.MkdirAll(o.DataDir, 0o700); err != nil {
		return fmt.Errorf("creating etcd data folder: %w", err)
	}

	var proc system.Runner

	if o.Runner != nil {
		proc = o.Runner(args)
	} else {
		confined := sandbox.System.Merge(sandbox.Policy{ReadWrite: []string{o.DataDir}, ReadOnly: []string{o.SecretsDir}, Exec: []string{o.Binary}})
		proc = &runner.Process{Args: args, Env: o.Env, Output: o.Output, GracefulTimeout: 15 * time.Second, Sandbox: &confined, OOMScoreAdj: o.OOMScoreAdj, Log: o.Log}
	}

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()

	var wg sync.WaitGroup

	m.mu.Lock()
	m.running = true
	m.recovering = p.recover != nil
	m.mu.Unlock()

	defer func() {
		m.mu.Lock()
		m.running = false
		m.mu.Unlock()
	}()

	wg.Add(1)

	go func() {
		defer wg.Done()
		m.afterStart(runCtx, o, p)
	}()

	m.setPhase(o.Log, "running")

	err = proc.Run(runCtx)

	cancel()
	wg.Wait()

	return err
}

// afterStart imports a recovery snapshot, then promotes this member while it is a learner.
func (m *Manager) afterStart(ctx context.Context, o Options, p plan) {
	if p.recover != nil {
		for {
			err := m.importSnapshot(ctx, o)
			if err == nil {
				break
			}

			o.Log.Warn("etcd: recovering from snapshot", zap.Error(err))

			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}

		m.mu.Lock()
		m.recovering = false
		m.mu.Unlock()
	}

	m.promoteLoop(ctx, o)
}

// promoteLoop promotes this member once it is in sync with the leader; it returns when the
// member is a voter or ctx ends.
func (m *Manager) promoteLoop(ctx context.Context, o Options) {
	started := time.Now()

	for {
		done, err := m.tryPromote(ctx, o, started)
		if done {
			return
		}

		if err != nil {
			o.Log.Debug("etcd: promotion not done yet", zap.Error(err))
		}

		select {
		case <-ctx.Done():
			return
		case <-time.After(o.PromoteInterval):
		}
	}
}

// promoteHold is how long a learner waits for its known peers to join before promotion.
const promoteHold = 4 * time.Second

// peersNotMembers lists the peer addresses that are not members yet.
func (m *Manager) peersNotMembers(ctx context.Context, o Options, cli *clientv3.Client) []string {
	if o.Peers == nil {
		return nil
	}

	addrs, err := o.Peers(ctx)
	if err != nil {
		return nil
	}

	lctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()

	list, err := cli.MemberList(lctx)
	if err != nil {
		return nil
	}

	var out []string

	for _, a := range addrs {
		h := hostOf(a)
		if h == "" || o.isSelf(h) {
			continue
		}

		found := false

		for _, mem := range list.Members {
			for _, u := range mem.PeerURLs {
				if sameHost(hostOf(u), h) {
					found = true
				}
			}
		}

		if !found && !contains(out, h) {
			out = append(out, h)
		}
	}

	return out
}

func (m *Manager) tryPromote(ctx context.Context, o Options, started time.Time) (bool, error) {
	local, err := m.client(o, o.clientURL())
	if err != nil {
		return false, err
	}
	defer local.Close()

	sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()

	st, err := local.Status(sctx, o.clientURL())
	if err != nil {
		return false, err
	}

	if !st.IsLearner {
		return true, nil
	}

	m.setPhase(o.Log, "learner: waiting to be promoted")

	cli, err := m.clusterClient(ctx, o)
	if err != nil {
		return false, err
	}
	defer cli.Close()

	// Control planes booted together should all get in as learners before the first
	// promotion: etcd refuses any membership change for a few seconds after a new voter
	// connects. So hold the promotion briefly while a known peer is not yet a member.
	if since := time.Since(started); since < promoteHold {
		if waiting := m.peersNotMembers(ctx, o, cli); len(waiting) > 0 {
			return false, fmt.Errorf("holding promotion for %s while %v join", promoteHold-since, waiting)
		}
	}

	pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
	defer pcancel()

	if _, err := cli.MemberPromote(pctx, st.Header.MemberId); err != nil {
		if strings.Contains(err.Error(), "not a learner") {
			return true, nil
		}

		return false, fmt.Errorf("promoting member %x: %w", st.Header.MemberId, err)
	}

	m.setPhase(o.Log, "promoted to a voting member")

	return true, nil
}

// Health checks this node's member: it answers, it is a voting member, it has a leader, it has
// no alarm, a recovery is not in progress, and a quorum read succeeds.
func (m *Manager) Health(ctx context.Context) error {
	if err := m.notRecovering(); err != nil {
		return err
	}

	o, err := m.opts()
	if err != nil {
		return err
	}

	cli, err := m.client(o, o.clientURL())
	if err != nil {
		return err
	}
	defer cli.Close()

	st, err := cli.Status(ctx, o.clientURL())
	if err != nil {
		return fmt.Errorf("etcd status: %w", err)
	}

	if len(st.Errors) > 0 {
		return fmt.Errorf("etcd reports: %s", strings.Join(st.Errors, "; "))
	}

	if st.IsLearner {
		return fmt.Errorf("member is a learner, waiting to be promoted")
	}

	if st.Leader == 0 {
		return fmt.Errorf("member has no leader")
	}

	// A linearizable read proves the member reaches quorum.
	if _, err := cli.Get(ctx, "health", clientv3.WithCountOnly()); err != nil {
		return fmt.Errorf("etcd quorum read: %w", err)
	}

	// Again: the calls above can outlast a start that began recovering while they waited.
	return m.notRecovering()
}

// notRecovering fails while a recovery snapshot is still being imported.
func (m *Manager) notRecovering() error {
	m.mu.Lock()
	defer m.mu.Unlock()

	if m.recovering {
		return errors.New("recovering from a snapshot")
	}

	return nil
}
