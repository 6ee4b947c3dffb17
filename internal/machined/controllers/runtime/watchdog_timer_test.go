package runtime_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/container"
	"github.com/siderolabs/talos/pkg/machinery/config/types/runtime"
	configres "github.com/siderolabs/talos/pkg/machinery/resources/config"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	runtimectrl "github.com/talos-go/talos/internal/machined/controllers/runtime"
	"github.com/talos-go/talos/internal/testenv"
)

// The config's WatchdogTimerConfig document becomes the WatchdogTimerConfig resource, its
// timeout defaulted to a minute; removing the document removes it.
func TestWatchdogTimerConfigController(t *testing.T) {
	e := ctest.Start(t, runtimectrl.NewWatchdogTimerConfigController())

	doc := runtime.NewWatchdogTimerV1Alpha1()
	doc.WatchdogDevice = "/dev/watchdog0"

	c, err := container.New(doc)
	require.NoError(t, err)

	cfg := configres.NewMachineConfig(c)
	e.Create(cfg)

	ctest.AssertResource(e, runtimeres.WatchdogTimerConfigID, func(r *runtimeres.WatchdogTimerConfig, a *assert.Assertions) {
		a.Equal("/dev/watchdog0", r.TypedSpec().Device)
		a.Equal(time.Minute, r.TypedSpec().Timeout)
	})

	empty, err := container.New()
	require.NoError(t, err)

	e.Put(configres.NewMachineConfig(empty))
	ctest.AssertNoResource[*runtimeres.WatchdogTimerConfig](e, runtimeres.WatchdogTimerConfigID)
}

// fakeWatchdog stands in for a watchdog device, which the test's host cannot lend (arming the
// host's would reset it): it records what the controller does to it. The real device's ioctls
// are proven on metal by internal/e2e/metal.TestWatchdogTimer.
type fakeWatchdog struct {
	path string

	mu        sync.Mutex
	timeouts  []time.Duration
	feeds     []time.Time
	disarmed  bool
	afterDown int // keepalives after Disarm: must stay 0
}

func (f *fakeWatchdog) SetTimeout(d time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()

	f.timeouts = append(f.timeouts, d)

	return nil
}

func (f *fakeWatchdog) Keepalive() error {
	f.mu.Lock()
	defer f.mu.Unlock()

	if f.disarmed {
		f.afterDown++
	}

	f.feeds = append(f.feeds, time.Now())

	return nil
}

func (f *fakeWatchdog) Disarm() error {
	f.mu.Lock()
	defer f.mu.Unlock()

	f.disarmed = true

	return nil
}

func (f *fakeWatchdog) state() (timeouts []time.Duration, feeds []time.Time, disarmed bool, afterDown int) {
	f.mu.Lock()
	defer f.mu.Unlock()

	return slices.Clone(f.timeouts), slices.Clone(f.feeds), f.disarmed, f.afterDown
}

// The ping loop: the device is opened and given the timeout, fed three times per timeout and
// the status says so; a new timeout is set on the open device; a new device disarms the old
// one; no config disarms the device and removes the status.
func TestWatchdogTimerFeedsAndDisarms(t *testing.T) {
	var (
		mu     sync.Mutex
		opened []*fakeWatchdog
	)

	e := ctest.Start(t, &runtimectrl.WatchdogTimerController{Open: func(path string) (runtimectrl.WatchdogDevice, error) {
		mu.Lock()
		defer mu.Unlock()

		f := &fakeWatchdog{path: path}
		opened = append(opened, f)

		return f, nil
	}})
	device := func(i int) *fakeWatchdog {
		mu.Lock()
		defer mu.Unlock()

		if i >= len(opened) {
			return nil
		}

		return opened[i]
	}

	// A short timeout, so feeds come quickly (the document's minimum, 10 s, is validation's).
	cfg := runtimeres.NewWatchdogTimerConfig()
	cfg.TypedSpec().Device, cfg.TypedSpec().Timeout = "/dev/watchdog0", 600*time.Millisecond
	e.Create(cfg)

	ctest.AssertResource(e, runtimeres.WatchdogTimerConfigID, func(r *runtimeres.WatchdogTimerStatus, a *assert.Assertions) {
		a.Equal("/dev/watchdog0", r.TypedSpec().Device)
		a.Equal(600*time.Millisecond, r.TypedSpec().Timeout)
		a.Equal(200*time.Millisecond, r.TypedSpec().FeedInterval)
	})

	testenv.WaitFor(t, "ten feeds", 10*time.Second, func() error {
		if d := device(0); d != nil {
			if _, feeds, _, _ := d.state(); len(feeds) >= 10 {
				return nil
			}
		}

		return fmt.Errorf("not yet")
	})

	first := device(0)
	timeouts, feeds, disarmed, _ := first.state()

	if first.path != "/dev/watchdog0" || !slices.Equal(timeouts, []time.Duration{600 * time.Millisecond}) || disarmed {
		t.Fatalf("device %s: timeouts %v, disarmed %v", first.path, timeouts, disarmed)
	}

	// No gap between feeds may come near the timeout (the ticker runs at a third of it).
	for i := 1; i < len(feeds); i++ {
		if gap := feeds[i].Sub(feeds[i-1]); gap > 400*time.Millisecond {
			t.Errorf("feed %d came %s after the one before: the timeout is 600ms", i, gap)
		}
	}

	// A new timeout goes to the open device.
	ctest.Update(e, cfg, func(r *runtimeres.WatchdogTimerConfig) error {
		r.TypedSpec().Timeout = 900 * time.Millisecond

		return nil
	})
	ctest.AssertResource(e, runtimeres.WatchdogTimerConfigID, func(r *runtimeres.WatchdogTimerStatus, a *assert.Assertions) {
		a.Equal(300*time.Millisecond, r.TypedSpec().FeedInterval)
	})

	if timeouts, _, _, _ := first.state(); !slices.Equal(timeouts, []time.Duration{600 * time.Millisecond, 900 * time.Millisecond}) {
		t.Fatalf("timeouts set: %v", timeouts)
	}

	// Another device: the first is disarmed, the second armed.
	ctest.Update(e, cfg, func(r *runtimeres.WatchdogTimerConfig) error {
		r.TypedSpec().Device = "/dev/watchdog1"

		return nil
	})
	ctest.AssertResource(e, runtimeres.WatchdogTimerConfigID, func(r *runtimeres.WatchdogTimerStatus, a *assert.Assertions) {
		a.Equal("/dev/watchdog1", r.TypedSpec().Device)
	})

	if _, _, disarmed, _ := first.state(); !disarmed {
		t.Fatal("the first device is still armed after the config named another")
	}

	second := device(1)
	if second == nil || second.path != "/dev/watchdog1" {
		t.Fatalf("the second device was not opened: %+v", second)
	}

	// No config: disarmed, no status, and no more feeds.
	e.Destroy(cfg)
	ctest.AssertNoResource[*runtimeres.WatchdogTimerStatus](e, runtimeres.WatchdogTimerConfigID)

	testenv.WaitFor(t, "the second device disarmed", 5*time.Second, func() error {
		if _, _, disarmed, _ := second.state(); !disarmed {
			return fmt.Errorf("still armed")
		}

		return nil
	})

	time.Sleep(time.Second) // three feed intervals

	for i, d := range []*fakeWatchdog{first, second} {
		if _, _, _, after := d.state(); after > 0 {
			t.Errorf("device %d was fed %d times after it was disarmed", i, after)
		}
	}
}
