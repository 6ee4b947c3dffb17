package upgrade

import (
	"context"
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
