package activeconfig_test

import (
	"context"
	"testing"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/siderolabs/talos/pkg/machinery/config/container"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/talos-go/talos/internal/machined/controllers/activeconfig"
	"github.com/talos-go/talos/internal/machined/controllers/ctest"
)

// seen is a controller that reports whether each reconcile had a config.
type seen chan bool

func (seen) Name() string { return "test.Seen" }

func (seen) Inputs() []controller.Input {
	return []controller.Input{{Namespace: config.NamespaceName, Type: config.MachineConfigType, Kind: controller.InputWeak}}
}

func (seen) Outputs() []controller.Output { return nil }

func (s seen) Run(ctx context.Context, r controller.Runtime, _ *zap.Logger) error {
	return activeconfig.Run(ctx, r, func(cfg *config.MachineConfig) error {
		select {
		case s <- cfg != nil:
		case <-ctx.Done():
		}

		return nil
	})
}

// TestRun: the reconcile runs at start without a config (nil), again with the config once it
// is there, and with nil once it is gone.
func TestRun(t *testing.T) {
	s := make(seen)
	env := ctest.Start(t, s)

	// A reconcile for an earlier state may still be queued: wait for one that sees want.
	next := func(want bool) {
		t.Helper()

		for {
			select {
			case got := <-s:
				if got == want {
					return
				}
			case <-env.Ctx.Done():
				t.Fatalf("no reconcile with a config: %v", want)
			}
		}
	}

	next(false)

	c, err := container.New()
	require.NoError(t, err)

	cfg := config.NewMachineConfig(c)
	env.Create(cfg)
	next(true)

	require.NoError(t, env.State.Destroy(env.Ctx, cfg.Metadata()))
	next(false)
}
