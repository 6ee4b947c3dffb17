package timesync_test

import (
	"net"
	"sync"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	timeres "github.com/siderolabs/talos/pkg/machinery/resources/time"
	"github.com/stretchr/testify/assert"

	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	"github.com/talos-go/talos/internal/machined/controllers/timesync"
	"github.com/talos-go/talos/internal/testenv"
)

// offsets records the clock adjustments instead of making them: a test may not move the
// host's clock (the metal e2e suite moves a real one).
type offsets struct {
	mu   sync.Mutex
	list []time.Duration
}

func (o *offsets) adjust(d time.Duration) error {
	o.mu.Lock()
	defer o.mu.Unlock()

	o.list = append(o.list, d)

	return nil
}

func (o *offsets) get() []time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()

	return append([]time.Duration(nil), o.list...)
}

func timeConfig(t *testing.T, tc *v1alpha1.TimeConfig) func(*v1alpha1.Config) {
	t.Helper()

	return func(c *v1alpha1.Config) { c.MachineConfig.MachineTime = tc }
}

// A server whose clock is an hour ahead: the first server does not answer, the second does;
// the clock moves by its offset, the status is synced and counts the jump in its epoch.
func TestSyncFromTheFirstServerThatAnswers(t *testing.T) {
	server := testenv.StartNTPServer(t, "127.0.0.1:0", time.Hour)
	silent := deadUDPAddr(t)

	var o offsets

	e := ctest.Start(t, &timesync.SyncController{Sync: true, Adjust: o.adjust})

	// No config yet: upstream's default server, which a test does not reach.
	ctest.AssertResource(e, network.TimeServerID, func(r *network.TimeServerStatus, a *assert.Assertions) {
		a.Equal([]string{constants.DefaultNTPServer}, r.TypedSpec().NTPServers)
	})

	e.Create(ctest.MachineConfig(t, machine.TypeWorker, timeConfig(t, &v1alpha1.TimeConfig{TimeServers: []string{silent, server.Addr}})))

	ctest.AssertResource(e, timeres.StatusID, func(r *timeres.Status, a *assert.Assertions) {
		a.Equal(timeres.StatusSpec{Synced: true, Epoch: 1}, *r.TypedSpec())
	})
	ctest.AssertResource(e, network.TimeServerID, func(r *network.TimeServerStatus, a *assert.Assertions) {
		a.Equal([]string{silent, server.Addr}, r.TypedSpec().NTPServers)
	})

	got := o.get()
	if len(got) != 1 || (got[0]-time.Hour).Abs() > time.Second {
		t.Fatalf("the clock moved by %v, want one move of about 1h", got)
	}
}

// With no server answering the status stays unsynced until machine.time.bootTimeout passes;
// then the boot goes on, without a clock move.
func TestBootTimeoutUnlocksTheBoot(t *testing.T) {
	var o offsets

	e := ctest.Start(t, &timesync.SyncController{Sync: true, Adjust: o.adjust})
	e.Create(ctest.MachineConfig(t, machine.TypeWorker, timeConfig(t, &v1alpha1.TimeConfig{
		TimeServers: []string{deadUDPAddr(t)}, TimeBootTimeout: 3 * time.Second,
	})))

	ctest.AssertResource(e, timeres.StatusID, func(r *timeres.Status, a *assert.Assertions) {
		a.False(r.TypedSpec().Synced)
	})
	ctest.AssertResource(e, timeres.StatusID, func(r *timeres.Status, a *assert.Assertions) {
		a.Equal(timeres.StatusSpec{Synced: true}, *r.TypedSpec())
	})

	if got := o.get(); len(got) != 0 {
		t.Fatalf("the clock moved by %v without an answer", got)
	}
}

// A node whose host keeps the clock, or a config that disables sync: synced, sync disabled, and
// no server is asked.
func TestSyncDisabled(t *testing.T) {
	server := testenv.StartNTPServer(t, "127.0.0.1:0", time.Hour)

	for name, ctrl := range map[string]*timesync.SyncController{
		"host keeps the clock":  {Sync: false},
		"machine.time.disabled": {Sync: true},
	} {
		t.Run(name, func(t *testing.T) {
			var o offsets

			ctrl.Adjust = o.adjust
			e := ctest.Start(t, ctrl)
			e.Create(ctest.MachineConfig(t, machine.TypeWorker, timeConfig(t, &v1alpha1.TimeConfig{
				TimeServers: []string{server.Addr}, TimeDisabled: &ctrl.Sync, // disabled where sync would run
			})))

			ctest.AssertResource(e, timeres.StatusID, func(r *timeres.Status, a *assert.Assertions) {
				a.Equal(timeres.StatusSpec{Synced: true, SyncDisabled: true}, *r.TypedSpec())
			})

			if got := o.get(); len(got) != 0 {
				t.Fatalf("the clock moved by %v", got)
			}
		})
	}

	if n := server.Requests(); n != 0 {
		t.Fatalf("the server was asked %d times", n)
	}
}

// deadUDPAddr is a loopback UDP address nothing listens on: a query there is refused.
func deadUDPAddr(t *testing.T) string {
	t.Helper()

	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}

	addr := c.LocalAddr().String()
	c.Close()

	return addr
}
