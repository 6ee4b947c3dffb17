package runtime

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/controller/generic/transform"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// WatchdogTimerConfigController declares WatchdogTimerConfig: the device and timeout of the
// config's WatchdogTimerConfig document (the timeout defaulted to a minute, as machinery
// does); no document, no resource.
type WatchdogTimerConfigController = transform.Controller[*config.MachineConfig, *runtimeres.WatchdogTimerConfig]

// NewWatchdogTimerConfigController is upstream's WatchdogTimerConfigController.
func NewWatchdogTimerConfigController() *WatchdogTimerConfigController {
	return transform.NewController(
		transform.Settings[*config.MachineConfig, *runtimeres.WatchdogTimerConfig]{
			Name: "runtime.WatchdogTimerConfigController",
			MapMetadataOptionalFunc: func(cfg *config.MachineConfig) optional.Optional[*runtimeres.WatchdogTimerConfig] {
				if cfg.Metadata().ID() != config.ActiveID || cfg.Config().Runtime().WatchdogTimer() == nil {
					return optional.None[*runtimeres.WatchdogTimerConfig]()
				}

				return optional.Some(runtimeres.NewWatchdogTimerConfig())
			},
			TransformFunc: func(_ context.Context, _ controller.Reader, _ *zap.Logger, cfg *config.MachineConfig, out *runtimeres.WatchdogTimerConfig) error {
				wd := cfg.Config().Runtime().WatchdogTimer()
				out.TypedSpec().Device = wd.Device()
				out.TypedSpec().Timeout = wd.Timeout()

				return nil
			},
		},
	)
}

// WatchdogDevice is an open hardware watchdog: once its timeout is set it resets the machine
// unless kept alive within it.
type WatchdogDevice interface {
	SetTimeout(time.Duration) error
	Keepalive() error
	// Disarm stops the timer with the magic close (a 'V' before closing), so closing the
	// device does not leave it running to reset the machine.
	Disarm() error
}

// WatchdogTimerController arms the hardware watchdog WatchdogTimerConfig names, keeps it
// alive three times per timeout from the controller's own loop (so a machined that stops
// running its controllers stops feeding it, and the machine is reset), and publishes
// WatchdogTimerStatus. Without the config, or when the controller stops, it disarms the
// device. As upstream's.
type WatchdogTimerController struct {
	// Open opens a watchdog device; OpenWatchdog when nil.
	Open func(path string) (WatchdogDevice, error)
}

// Name implements controller.Controller.
func (ctrl *WatchdogTimerController) Name() string { return "runtime.WatchdogTimerController" }

// Inputs implements controller.Controller.
func (ctrl *WatchdogTimerController) Inputs() []controller.Input {
	return []controller.Input{{Namespace: runtimeres.NamespaceName, Type: runtimeres.WatchdogTimerConfigType, ID: optional.Some(runtimeres.WatchdogTimerConfigID)}}
}

// Outputs implements controller.Controller.
func (ctrl *WatchdogTimerController) Outputs() []controller.Output {
	return []controller.Output{{Type: runtimeres.WatchdogTimerStatusType, Kind: controller.OutputExclusive}}
}

// watchdogFeedsPerTimeout is how many times per timeout the device is kept alive: upstream's
// three leave room for two late feeds.
const watchdogFeedsPerTimeout = 3

// Run implements controller.Controller.
func (ctrl *WatchdogTimerController) Run(ctx context.Context, r controller.Runtime, log *zap.Logger) error {
	open := ctrl.Open
	if open == nil {
		open = OpenWatchdog
	}

	w := &fedWatchdog{log: log}

	defer func() {
		w.stopTicker()
		w.disarm()
	}()

	for {
		select {
		case <-ctx.Done():
			return nil
		case <-w.tick:
			if err := w.dev.Keepalive(); err != nil {
				return fmt.Errorf("keeping the watchdog %s alive: %w", w.path, err)
			}

			continue
		case <-r.EventCh():
		}

		cfg, err := safe.ReaderGetByID[*runtimeres.WatchdogTimerConfig](ctx, r, runtimeres.WatchdogTimerConfigID)
		if err != nil && !state.IsNotFoundError(err) {
			return fmt.Errorf("reading the watchdog config: %w", err)
		}

		r.StartTrackingOutputs()

		if cfg == nil {
			w.stopTicker()
			w.disarm()
		} else {
			spec := cfg.TypedSpec()

			feed, err := w.arm(open, spec)
			if err != nil {
				return err
			}

			if err = safe.WriterModify(ctx, r, runtimeres.NewWatchdogTimerStatus(cfg.Metadata().ID()), func(st *runtimeres.WatchdogTimerStatus) error {
				st.TypedSpec().Device = w.path
				st.TypedSpec().Timeout = spec.Timeout
				st.TypedSpec().FeedInterval = feed

				return nil
			}); err != nil {
				return fmt.Errorf("writing the watchdog status: %w", err)
			}
		}

		if err = safe.CleanupOutputs[*runtimeres.WatchdogTimerStatus](ctx, r); err != nil {
			return err
		}
	}
}

// fedWatchdog is the device the controller keeps alive, and the ticker that feeds it.
type fedWatchdog struct {
	log    *zap.Logger
	dev    WatchdogDevice
	path   string
	ticker *time.Ticker
	tick   <-chan time.Time // nil without a device: never fires
}

func (w *fedWatchdog) stopTicker() {
	if w.ticker != nil {
		w.ticker.Stop()
		w.ticker, w.tick = nil, nil
	}
}

// disarm stops the device, which no longer resets the machine.
func (w *fedWatchdog) disarm() {
	if w.dev == nil {
		return
	}

	if err := w.dev.Disarm(); err != nil {
		w.log.Error("disarming the hardware watchdog", zap.String("device", w.path), zap.Error(err))
	} else {
		w.log.Info("hardware watchdog disarmed", zap.String("device", w.path))
	}

	w.dev, w.path = nil, ""
}

// arm opens the device spec names (disarming another one first), sets its timeout, feeds it
// and starts feeding it watchdogFeedsPerTimeout times a timeout; it returns the feed interval.
func (w *fedWatchdog) arm(open func(string) (WatchdogDevice, error), spec *runtimeres.WatchdogTimerConfigSpec) (time.Duration, error) {
	if w.dev != nil && w.path != spec.Device { // another device: the old one must not reset the machine
		w.stopTicker()
		w.disarm()
	}

	if w.dev == nil {
		dev, err := open(spec.Device)
		if err != nil {
			return 0, fmt.Errorf("opening the watchdog device: %w", err)
		}

		w.dev, w.path = dev, spec.Device
	}

	if err := w.dev.SetTimeout(spec.Timeout); err != nil {
		return 0, fmt.Errorf("setting the watchdog %s timeout to %s: %w", w.path, spec.Timeout, err)
	}

	feed := spec.Timeout / watchdogFeedsPerTimeout

	w.stopTicker()
	w.ticker = time.NewTicker(feed)
	w.tick = w.ticker.C

	if err := w.dev.Keepalive(); err != nil {
		return 0, fmt.Errorf("keeping the watchdog %s alive: %w", w.path, err)
	}

	w.log.Info("hardware watchdog armed", zap.String("device", w.path), zap.Duration("timeout", spec.Timeout), zap.Duration("feed_interval", feed))

	return feed, nil
}

// watchdogFile is a Linux watchdog device (Documentation/watchdog/watchdog-api.rst).
type watchdogFile struct{ f *os.File }

// OpenWatchdog opens a Linux watchdog device. Opening it starts the timer with the driver's
// default timeout.
func OpenWatchdog(path string) (WatchdogDevice, error) {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return nil, err
	}

	return &watchdogFile{f: f}, nil
}

// SetTimeout sets the timeout in whole seconds, the kernel's unit.
func (w *watchdogFile) SetTimeout(d time.Duration) error {
	return unix.IoctlSetPointerInt(int(w.f.Fd()), unix.WDIOC_SETTIMEOUT, int(d/time.Second))
}

// Keepalive restarts the timer.
func (w *watchdogFile) Keepalive() error { return unix.IoctlWatchdogKeepalive(int(w.f.Fd())) }

// Disarm writes the magic 'V' and closes the device: the driver stops the timer.
func (w *watchdogFile) Disarm() error {
	_, err := w.f.WriteString("V")
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}

	return err
}
