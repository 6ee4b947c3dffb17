package upgrade

import (
	"context"
	"slices"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"go.uber.org/zap"
)

// setStage publishes the node's stage while an upgrade or reset runs (MachineStatus, as
// upstream's `get machinestatus` shows it: upgrading, resetting), and puts it back to running
// when the operation failed and the node stays up.
func (m *Manager) setStage(stage runtimeres.MachineStage, ready bool) {
	if m.R.State == nil {
		return
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	if err := safe.StateModify(ctx, m.R.State, runtimeres.NewMachineStatus(), func(res *runtimeres.MachineStatus) error {
		res.TypedSpec().Stage = stage
		res.TypedSpec().Status.Ready = ready

		return nil
	}); err != nil {
		m.log().Warn("updating machine status", zap.Error(err))
	}
}

// upgradeCondition names the MachineStatus condition left unmet while a new slot is on trial:
// `upgrade --wait` returns once it is gone, when a kill can no longer roll the node back.
const upgradeCondition = "upgrade"

// setTrialCondition adds (reason != "") or removes the upgrade condition. The node is ready
// when it is running and no condition is unmet.
func (m *Manager) setTrialCondition(reason string) {
	if m.R.State == nil {
		return
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	if err := safe.StateModify(ctx, m.R.State, runtimeres.NewMachineStatus(), func(res *runtimeres.MachineStatus) error {
		st := &res.TypedSpec().Status
		st.UnmetConditions = slices.DeleteFunc(st.UnmetConditions, func(c runtimeres.UnmetCondition) bool { return c.Name == upgradeCondition })

		if reason != "" {
			st.UnmetConditions = append(st.UnmetConditions, runtimeres.UnmetCondition{Name: upgradeCondition, Reason: reason})
		}

		st.Ready = res.TypedSpec().Stage == runtimeres.MachineStageRunning && len(st.UnmetConditions) == 0

		return nil
	}); err != nil {
		m.log().Warn("updating machine status", zap.Error(err))
	}
}
