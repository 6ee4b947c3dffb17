package machined

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"go.uber.org/zap"

	"github.com/talos-go/talos/internal/machined/system"
)

// servicesCondition is MachineStatus's condition on the services, as upstream's: each service
// that runs is healthy (or of unknown health), none has failed, and the node's required ones
// run. The node is ready when it is running and no condition is unmet.
const servicesCondition = "services"

// requiredServices are the services a node of this type must run.
func (n *node) requiredServices(typ machine.Type) []string {
	required := []string{"apid"}

	if typ.IsControlPlane() {
		required = append(required, "etcd", "trustd")
	}

	if !n.r.Mode.SharesHost() && n.r.Mode.RunsKubernetes() {
		required = append(required, "kubelet")
	}

	return required
}

// servicesProblems says what keeps the services' condition unmet ("" when none does).
func servicesProblems(states map[string]system.Info, required []string) string {
	var problems []string

	for _, id := range slices.Sorted(maps.Keys(states)) {
		switch info := states[id]; {
		case info.State == system.StateFailed:
			problems = append(problems, id+" failed")
		case info.State == system.StateRunning && !info.Health.Healthy && !info.Health.Unknown:
			problems = append(problems, id+" not healthy")
		}
	}

	for _, id := range required {
		if states[id].State != system.StateRunning {
			problems = append(problems, id+" not running")
		}
	}

	return strings.Join(problems, ", ")
}

// setServicesCondition records the services' condition in MachineStatus.
func (n *node) setServicesCondition(ctx context.Context, states map[string]system.Info) {
	reason := servicesProblems(states, n.requiredServices(n.r.MachineType(ctx)))

	if err := safe.StateModify(ctx, n.r.State, runtimeres.NewMachineStatus(), func(res *runtimeres.MachineStatus) error {
		st := &res.TypedSpec().Status
		st.UnmetConditions = slices.DeleteFunc(st.UnmetConditions, func(c runtimeres.UnmetCondition) bool { return c.Name == servicesCondition })

		if reason != "" {
			st.UnmetConditions = append(st.UnmetConditions, runtimeres.UnmetCondition{Name: servicesCondition, Reason: reason})
		}

		st.Ready = res.TypedSpec().Stage == runtimeres.MachineStageRunning && len(st.UnmetConditions) == 0

		return nil
	}); err != nil && ctx.Err() == nil {
		n.r.Log.Warn("updating machine status", zap.Error(fmt.Errorf("services condition: %w", err)))
	}
}
