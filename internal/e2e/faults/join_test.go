package faults

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/talos-go/talos/internal/testenv"
)

// TestKillDuringEtcdJoin: a control plane leaves etcd and wipes its EPHEMERAL (a graceful
// reset that keeps its config), reboots and joins etcd again as a new member; one of its
// services is killed at a random moment of that. The member must end up joined, the cluster
// healthy, and the keys written before all readable.
func TestKillDuringEtcdJoin(t *testing.T) {
	if err := clusterHealthy(t); err != nil {
		awaitHealthy(t, time.Now(), healthyBound)
	}

	ec := etcdClient(t, cp1)

	for run := range runs {
		for _, svc := range services {
			t.Run(fmt.Sprintf("%s/%d", svc, run), func(t *testing.T) {
				node := []string{cp2, cp3}[rng.IntN(2)]
				keys := putKeys(t, ec, fmt.Sprintf("join-%s-%d", svc, run), 20)
				delay := time.Duration(1000+rng.IntN(5000)) * time.Millisecond

				// A case of another test may have left the node finishing an upgrade (its call
				// can end before the node does, when a kill cut the stream): the node refuses a
				// reset until then, saying so; anything else fails the case.
				testenv.WaitFor(t, "the reset of "+node+" accepted", healthyBound, func() error {
					out, stderr, code := talosctl(t, "-n", node, "reset", "--graceful", "--reboot", "--system-labels-to-wipe", "EPHEMERAL", "--wait=false")
					if code != 0 && strings.Contains(stderr, "in progress on this node") {
						return fmt.Errorf("reset of %s: %s", node, strings.TrimSpace(stderr))
					}

					if code != 0 {
						t.Fatalf("reset of %s: exit %d %s%s", node, code, out, stderr)
					}

					return nil
				})

				reset := time.Now()
				time.Sleep(delay)

				killed := time.Now()
				tryKill9(t, svc, node) // the node may be rebooting: then there is nothing to kill

				recordRecovery("kill "+svc+" during etcd join", awaitHealthy(t, killed, healthyBound))
				// The cluster can look healthy before a slow reset has left etcd: wait until the
				// reset is over (or was cut short by the kill), then for the cluster to be healthy
				// again, before the members are checked and the next case resets a node.
				awaitStage(t, node, "running", healthyBound)
				awaitHealthy(t, time.Now(), healthyBound)
				t.Logf("%s rejoined: healthy %v after the reset", node, time.Since(reset).Round(100*time.Millisecond))

				out, stderr, code := talosctl(t, "-n", cp1, "etcd", "members")
				if voters := etcdVoters(out); code != 0 || len(voters) != 3 || !strings.Contains(strings.Join(voters, " "), node+":2380") {
					t.Fatalf("etcd members after %s rejoined: exit %d\n%s%s", node, code, out, stderr)
				}

				checkKeys(t, ec, keys)
			})
		}
	}
}
