package etcd

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Downgrade runs one of etcd's storage downgrade actions (validate, enable, cancel) through
// the local member and returns the cluster version etcd reports.
func (m *Manager) Downgrade(ctx context.Context, action clientv3.DowngradeAction, version string) (string, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()

	o, err := m.opts()
	if err != nil {
		return "", err
	}

	cli, err := m.client(o, o.clientURL())
	if err != nil {
		return "", err
	}
	defer cli.Close()

	resp, err := cli.Downgrade(ctx, action, version)
	if err != nil {
		return "", fmt.Errorf("etcd downgrade: %w", err)
	}

	return resp.Version, nil
}
