package secrets

import (
	"context"
	"fmt"
	"time"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"go.uber.org/zap"

	"github.com/talos-go/talos/internal/machined/resources"
	"github.com/talos-go/talos/internal/trustd"
)

// JoinRequestsController carries join by approval between the API and trustd on a control
// plane (docs/join-approval.md): an admin's JoinDecision becomes a decision file in the join
// folder on STATE, and the requests trustd recorded there are published as JoinRequests. The folder
// is polled: trustd is another process and writes it whenever a node asks.
type JoinRequestsController struct {
	Dir  string        // the join request folder trustd writes (<STATE>/joins)
	Poll time.Duration // how often the folder is read; 2s when zero
}

// Name implements controller.Controller.
func (ctrl *JoinRequestsController) Name() string { return "secrets.JoinRequestsController" }

// Inputs implements controller.Controller.
func (ctrl *JoinRequestsController) Inputs() []controller.Input {
	return []controller.Input{
		{Namespace: secrets.NamespaceName, Type: secrets.OSRootType, ID: optional.Some(secrets.OSRootID), Kind: controller.InputWeak},
		{Namespace: cluster.NamespaceName, Type: resources.JoinDecisionType, Kind: controller.InputWeak},
	}
}

// Outputs implements controller.Controller.
func (ctrl *JoinRequestsController) Outputs() []controller.Output {
	return []controller.Output{{Type: resources.JoinRequestType, Kind: controller.OutputExclusive}}
}

// Run implements controller.Controller.
func (ctrl *JoinRequestsController) Run(ctx context.Context, r controller.Runtime, log *zap.Logger) error {
	poll := ctrl.Poll
	if poll <= 0 {
		poll = 2 * time.Second
	}

	t := time.NewTicker(poll)
	defer t.Stop()

	joins := &trustd.Joins{Dir: ctrl.Dir}

	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.EventCh():
		case <-t.C:
		}

		if err := ctrl.reconcile(ctx, r, log, joins); err != nil {
			if ctx.Err() != nil {
				return nil
			}

			log.Error("join requests", zap.Error(err))
		}
	}
}

func (ctrl *JoinRequestsController) reconcile(ctx context.Context, r controller.Runtime, log *zap.Logger, joins *trustd.Joins) error {
	root, err := safe.ReaderGetByID[*secrets.OSRoot](ctx, r, secrets.OSRootID)
	if err != nil && !state.IsNotFoundError(err) {
		return fmt.Errorf("reading os root: %w", err)
	}

	// Only a node holding the CA key runs trustd.
	if root == nil || !hasKey(root.TypedSpec()) {
		return nil
	}

	decisions, err := safe.ReaderListAll[*resources.JoinDecision](ctx, r)
	if err != nil {
		return fmt.Errorf("listing join decisions: %w", err)
	}

	for d := range decisions.All() {
		id, want := d.Metadata().ID(), trustd.JoinState(d.TypedSpec().State)

		cur, err := joins.Decision(id)
		if err != nil || cur == want {
			continue
		}

		if err = joins.Decide(id, want); err != nil {
			log.Warn("recording join decision", zap.String("id", id), zap.Error(err))

			continue
		}

		log.Info("join request decided", zap.String("id", id), zap.String("state", string(want)))
	}

	list, err := joins.List()
	if err != nil {
		return fmt.Errorf("reading join requests: %w", err)
	}

	r.StartTrackingOutputs()

	for _, req := range list {
		if err = safe.WriterModify(ctx, r, resources.NewJoinRequest(req.ID), func(res *resources.JoinRequest) error {
			spec := res.TypedSpec()
			spec.State = string(req.State)
			spec.Addresses = req.Addresses
			spec.Names = req.Names
			spec.FirstSeen = req.FirstSeen
			spec.LastSeen = req.LastSeen

			return nil
		}); err != nil {
			return fmt.Errorf("writing join request %s: %w", req.ID, err)
		}
	}

	return safe.CleanupOutputs[*resources.JoinRequest](ctx, r)
}
