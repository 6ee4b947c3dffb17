// Package etcd holds the controllers of the etcd namespace.
package etcd

import (
	"context"
	"fmt"
	"time"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/resources/etcd"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// StatusSource is the node's etcd member (internal/etcd.Manager).
type StatusSource interface {
	Status(ctx context.Context) (*clientv3.StatusResponse, error)
}

// MemberController writes the local etcd Member resource (etcd/EtcdMembers "local") with this
// node's member ID while its etcd answers, and removes it once etcd has not answered for a few
// polls in a row (the node left the cluster, or etcd stopped).
type MemberController struct {
	Etcd StatusSource
	// Interval between polls (default 5s).
	Interval time.Duration
	// Misses is how many failed polls in a row remove the resource (default 3).
	Misses int
}

// Name implements controller.Controller.
func (ctrl *MemberController) Name() string { return "etcd.MemberController" }

// Inputs implements controller.Controller.
func (ctrl *MemberController) Inputs() []controller.Input { return nil }

// Outputs implements controller.Controller.
func (ctrl *MemberController) Outputs() []controller.Output {
	return []controller.Output{{Type: etcd.MemberType, Kind: controller.OutputExclusive}}
}

// FormatMemberID formats an etcd member ID as etcd and talosctl print it.
func FormatMemberID(id uint64) string { return fmt.Sprintf("%016x", id) }

// Run implements controller.Controller.
func (ctrl *MemberController) Run(ctx context.Context, r controller.Runtime, log *zap.Logger) error {
	interval := ctrl.Interval
	if interval == 0 {
		interval = 5 * time.Second
	}

	misses := ctrl.Misses
	if misses == 0 {
		misses = 3
	}

	ticker := time.NewTicker(interval)
	defer ticker.Stop()

	failed := 0

	for {
		sctx, cancel := context.WithTimeout(ctx, interval)
		st, err := ctrl.Etcd.Status(sctx)

		cancel()

		switch {
		case err == nil:
			failed = 0

			if err := safe.WriterModify(ctx, r, etcd.NewMember(etcd.NamespaceName, etcd.LocalMemberID), func(m *etcd.Member) error {
				m.TypedSpec().MemberID = FormatMemberID(st.Header.GetMemberId())

				return nil
			}); err != nil {
				return fmt.Errorf("writing etcd member: %w", err)
			}
		case ctx.Err() != nil:
			return nil
		default:
			failed++

			if failed == misses {
				log.Debug("etcd does not answer: removing the local member", zap.Error(err))

				if err := r.Destroy(ctx, resource.NewMetadata(etcd.NamespaceName, etcd.MemberType, etcd.LocalMemberID, resource.VersionUndefined)); err != nil && !state.IsNotFoundError(err) {
					return fmt.Errorf("removing etcd member: %w", err)
				}
			}
		}

		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		case <-r.EventCh():
		}
	}
}
