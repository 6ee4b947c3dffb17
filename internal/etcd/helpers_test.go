package etcd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"

	"github.com/talos-go/talos/internal/testenv"
)

// testNet picks a 127.X.Y.0/24 block for this test process so concurrent runs do not collide.
func testNet() string {
	p := os.Getpid()

	return fmt.Sprintf("127.%d.%d.", 100+p%100, (p/100)%250+1)
}

type testNode struct {
	t    testing.TB
	m    *Manager
	opts Options

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan error
}

type testCluster struct {
	t     testing.TB
	nodes []*testNode
	addrs []string
}

func newTestCluster(t testing.TB, n int, caCert, caKey []byte) *testCluster {
	t.Helper()

	bin := testenv.EtcdBinary(t)
	base := testNet()
	c := &testCluster{t: t}

	seq := testSeq()
	for i := range n {
		c.addrs = append(c.addrs, fmt.Sprintf("%s%d", base, 10*(seq%25)+i+1))
	}

	root := t.TempDir()

	for i := range n {
		dir := filepath.Join(root, fmt.Sprintf("node%d", i+1))
		addr := c.addrs[i]
		logFile, err := os.Create(filepath.Join(root, fmt.Sprintf("node%d.log", i+1)))
		if err != nil {
			t.Fatal(err)
		}

		t.Cleanup(func() {
			logFile.Close()

			if t.Failed() {
				data, _ := os.ReadFile(logFile.Name())
				if os.Getenv("TALOS_ETCD_TEST_KEEP_LOGS") != "" {
					os.WriteFile(filepath.Join(os.TempDir(), fmt.Sprintf("etcd-test-%s.log", addr)), data, 0o600)
				}

				if len(data) > 6000 {
					data = data[len(data)-6000:]
				}

				t.Logf("etcd log of %s (tail):\n%s", addr, data)
			}
		})

		opts := Options{
			Binary:       bin,
			Name:         fmt.Sprintf("cp-%d", i+1),
			Address:      addr,
			DataDir:      filepath.Join(dir, "EPHEMERAL", "lib", "etcd"),
			SecretsDir:   filepath.Join(dir, "system", "secrets", "etcd"),
			CACert:       caCert,
			CAKey:        caKey,
			ClusterToken: "test",
			Peers: func(context.Context) ([]string, error) {
				return c.addrs, nil
			},
			Output:          logFile,
			Log:             zaptest.NewLogger(t, zaptest.Level(testLogLevel())),
			JoinRetry:       300 * time.Millisecond,
			PromoteInterval: 300 * time.Millisecond,
		}
		node := &testNode{t: t, opts: opts}
		node.m = NewManager(func() (Options, error) { return node.opts, nil })
		c.nodes = append(c.nodes, node)
	}

	t.Cleanup(func() {
		for _, n := range c.nodes {
			n.stop()
		}
	})

	return c
}

var (
	seqMu sync.Mutex
	seq   int
)

// testSeq gives each cluster in this process its own range of last octets.
func testSeq() int {
	seqMu.Lock()
	defer seqMu.Unlock()

	seq++

	return seq
}

// start runs the node's etcd service loop (as the supervisor would, restarting on exit).
func (n *testNode) start() {
	n.mu.Lock()
	defer n.mu.Unlock()

	if n.cancel != nil {
		return
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	n.cancel, n.done = cancel, done

	go func() {
		var err error

		for ctx.Err() == nil {
			err = n.m.Run(ctx)
			if ctx.Err() == nil {
				select {
				case <-ctx.Done():
				case <-time.After(200 * time.Millisecond):
				}
			}
		}

		done <- err
	}()
}

// stop stops the node's etcd (SIGTERM) and waits.
func (n *testNode) stop() {
	n.mu.Lock()
	cancel, done := n.cancel, n.done
	n.cancel, n.done = nil, nil
	n.mu.Unlock()

	if cancel == nil {
		return
	}

	cancel()
	<-done
}

func (n *testNode) stopCtx(context.Context) error {
	n.stop()

	return nil
}

// votersHealthy returns nil when the cluster seen from n has want voting members, all healthy.
func (c *testCluster) votersHealthy(n *testNode, want int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	members, err := n.m.Members(ctx, false)
	if err != nil {
		return err
	}

	voters := 0

	for _, mem := range members {
		if mem.IsLearner {
			return fmt.Errorf("member %s is still a learner", mem.Name)
		}

		voters++
	}

	if voters != want {
		return fmt.Errorf("%d voting members, want %d", voters, want)
	}

	for _, node := range c.nodes {
		for _, mem := range members {
			if mem.Name == node.opts.Name {
				if err := node.m.Health(ctx); err != nil {
					return fmt.Errorf("%s: %w", node.opts.Name, err)
				}
			}
		}
	}

	return nil
}

func errorIs(err, target error) bool { return errors.Is(err, target) }

func testLogLevel() zapcore.Level {
	if os.Getenv("TALOS_ETCD_TEST_VERBOSE") != "" {
		return zap.InfoLevel
	}

	return zap.WarnLevel
}
