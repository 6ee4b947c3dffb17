package server

import (
	"context"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/emptypb"
)

// downgrade runs an etcd downgrade action on this control plane's member.
func (s *Machine) downgrade(ctx context.Context, action clientv3.DowngradeAction, version string) (*machine.EtcdClusterDowngrade, error) {
	m, err := s.etcdManager(ctx)
	if err != nil {
		return nil, err
	}

	clusterVersion, err := m.Downgrade(ctx, action, version)
	if err != nil {
		return nil, etcdError(err)
	}

	return &machine.EtcdClusterDowngrade{ClusterVersion: clusterVersion}, nil
}

// EtcdDowngradeValidate asks etcd whether the cluster can be downgraded to the version.
func (s *Machine) EtcdDowngradeValidate(ctx context.Context, req *machine.EtcdDowngradeValidateRequest) (*machine.EtcdDowngradeValidateResponse, error) {
	d, err := s.downgrade(ctx, clientv3.DowngradeValidate, req.GetVersion())
	if err != nil {
		return nil, err
	}

	return &machine.EtcdDowngradeValidateResponse{Messages: []*machine.EtcdDowngradeValidate{{Metadata: s.metadata(ctx), ClusterDowngrade: d}}}, nil
}

// EtcdDowngradeEnable starts the cluster's storage downgrade to the version.
func (s *Machine) EtcdDowngradeEnable(ctx context.Context, req *machine.EtcdDowngradeEnableRequest) (*machine.EtcdDowngradeEnableResponse, error) {
	d, err := s.downgrade(ctx, clientv3.DowngradeEnable, req.GetVersion())
	if err != nil {
		return nil, err
	}

	return &machine.EtcdDowngradeEnableResponse{Messages: []*machine.EtcdDowngradeEnable{{Metadata: s.metadata(ctx), ClusterDowngrade: d}}}, nil
}

// EtcdDowngradeCancel cancels a downgrade in progress.
func (s *Machine) EtcdDowngradeCancel(ctx context.Context, _ *emptypb.Empty) (*machine.EtcdDowngradeCancelResponse, error) {
	d, err := s.downgrade(ctx, clientv3.DowngradeCancel, "")
	if err != nil {
		return nil, err
	}

	return &machine.EtcdDowngradeCancelResponse{Messages: []*machine.EtcdDowngradeCancel{{Metadata: s.metadata(ctx), ClusterDowngrade: d}}}, nil
}
