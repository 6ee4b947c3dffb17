package machined

import (
	"context"

	"github.com/talos-go/talos/internal/machined/services"
	"github.com/talos-go/talos/internal/machined/upgrade"
)

// upgradeNode adapts node to what the upgrade sequence needs.
type upgradeNode struct{ n *node }

func (u upgradeNode) StopServices(ctx context.Context) error { return u.n.r.Supervisor.StopAll(ctx) }
func (u upgradeNode) Reboot() error                          { return u.n.Reboot("") }
func (u upgradeNode) Shutdown() error                        { return u.n.Shutdown("") }

func (u upgradeNode) IsControlPlane() bool {
	return u.n.r.MachineType(context.Background()).IsControlPlane()
}

// newUpgrades returns the node's upgrade manager; on control planes it guards upgrades and
// resets with the node's etcd (health without this member, upgrade lock, leave).
func (n *node) newUpgrades() *upgrade.Manager {
	m := upgrade.New(n.r, upgradeNode{n: n})
	m.Etcd = &upgrade.ClusterGuard{
		Etcd: n.r.Etcd,
		StopEtcd: func(ctx context.Context) error {
			return n.r.Supervisor.Stop(ctx, services.EtcdServiceID)
		},
	}

	return m
}
