package machined

import (
	"context"

	"github.com/talos-go/talos/internal/machined/upgrade"
)

// upgradeNode adapts node to what the upgrade sequence needs.
type upgradeNode struct{ n *node }

func (u upgradeNode) StopServices(ctx context.Context) error { return u.n.r.Supervisor.StopAll(ctx) }
func (u upgradeNode) Reboot() error                          { return u.n.Reboot("") }
func (u upgradeNode) Shutdown() error                        { return u.n.Shutdown("") }

func (u upgradeNode) IsControlPlane() bool {
	cfg := u.n.r.Config()

	return cfg != nil && cfg.Machine() != nil && cfg.Machine().Type().IsControlPlane()
}

// newUpgrades returns the node's upgrade manager. Its Etcd guard is left nil until the etcd
// service is wired in: set it to &upgrade.ClusterGuard{Etcd: <etcd manager>, StopEtcd: ...}.
func (n *node) newUpgrades() *upgrade.Manager {
	return upgrade.New(n.r, upgradeNode{n: n})
}
