// Package timesync keeps the node's clock: a node on its own kernel asks the config's NTP
// servers for the time and steps or slews its clock, as upstream's timed; elsewhere the host
// keeps the clock and the node only reports that.
package timesync

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/beevik/ntp"
	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	timeres "github.com/siderolabs/talos/pkg/machinery/resources/time"
	"go.uber.org/zap"
)

// Polling, as ntpd's defaults: after a sync the next query comes MinPoll later, doubling up to
// MaxPoll while the clock stays within stepThreshold; failures are retried sooner, from a second
// up to maxRetry.
const (
	MinPoll      = 64 * time.Second
	MaxPoll      = 1024 * time.Second
	maxRetry     = 32 * time.Second
	queryTimeout = 5 * time.Second
	// epochJump is how far the clock must move for the status's epoch to count a jump.
	epochJump = 15 * time.Minute
)

// SyncController publishes the time status (TimeStatus "node") and the NTP servers in use
// (TimeServerStatus "timeservers"). With Sync it keeps the kernel's clock: the config's
// machine.time.servers (upstream's default, time.cloudflare.com, when it names none) are asked
// in order until one answers, and the clock moves by the offset it gives. Until the first sync
// the status is not synced, unless machine.time.bootTimeout passes first.
type SyncController struct {
	// Sync is a node that keeps its kernel's clock (metal). Without it the host keeps the clock:
	// the status is synced, with sync disabled.
	Sync bool
	// Adjust moves the clock by offset: AdjustClock, the kernel's clock, when nil. Unit tests
	// record the offset instead, as they may not move the host's clock.
	Adjust func(offset time.Duration) error
	// Log gets the syncs and failures (the runtime's logger, which shows warnings only, when
	// nil): the node's log, where a clock step belongs.
	Log *zap.Logger
	// PlatformServers are the platform's NTP servers, used when the config names none (before
	// upstream's default).
	PlatformServers []string
}

// Name implements controller.Controller.
func (ctrl *SyncController) Name() string { return "time.SyncController" }

// Inputs implements controller.Controller.
func (ctrl *SyncController) Inputs() []controller.Input {
	return []controller.Input{{Namespace: config.NamespaceName, Type: config.MachineConfigType, ID: optional.Some(config.ActiveID), Kind: controller.InputWeak}}
}

// Outputs implements controller.Controller.
func (ctrl *SyncController) Outputs() []controller.Output {
	return []controller.Output{
		{Type: timeres.StatusType, Kind: controller.OutputExclusive},
		{Type: network.TimeServerStatusType, Kind: controller.OutputExclusive},
	}
}

// settings is what the config says of time.
type settings struct {
	servers     []string
	disabled    bool
	bootTimeout time.Duration
}

func (ctrl *SyncController) settings(ctx context.Context, r controller.Runtime) (settings, error) {
	s := settings{servers: []string{constants.DefaultNTPServer}}
	if len(ctrl.PlatformServers) > 0 {
		s.servers = ctrl.PlatformServers
	}

	cfg, err := safe.ReaderGetByID[*config.MachineConfig](ctx, r, config.ActiveID)
	if err != nil {
		if state.IsNotFoundError(err) {
			return s, nil
		}

		return s, err
	}

	if m := cfg.Config().Machine(); m != nil {
		if servers := m.Time().Servers(); len(servers) > 0 {
			s.servers = servers
		}

		s.disabled, s.bootTimeout = m.Time().Disabled(), m.Time().BootTimeout()
	}

	return s, nil
}

// answer is one round of queries: the servers asked, and the first valid answer or the errors.
type answer struct {
	servers []string
	server  string
	offset  time.Duration
	err     error
}

// Run implements controller.Controller. Queries run beside the loop, as a server that does not
// answer (or a name that does not resolve) takes seconds: a new config is taken at once, and an
// answer from servers no longer configured is dropped.
func (ctrl *SyncController) Run(ctx context.Context, r controller.Runtime, log *zap.Logger) error {
	adjust := ctrl.Adjust
	if adjust == nil {
		adjust = AdjustClock
	}

	if ctrl.Log != nil {
		log = ctrl.Log
	}

	var (
		started = time.Now()
		st      syncState
		answers = make(chan answer)
		wake    = time.NewTimer(time.Hour)
	)

	defer wake.Stop()

	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.EventCh():
		case <-wake.C:
		case a := <-answers:
			if err := st.take(a, adjust, log); err != nil {
				return err
			}
		}

		s, err := ctrl.settings(ctx, r)
		if err != nil {
			return err
		}

		if err = writeServers(ctx, r, s.servers); err != nil {
			return err
		}

		if !ctrl.Sync || s.disabled {
			if err = writeStatus(ctx, r, timeres.StatusSpec{Synced: true, Epoch: st.epoch, SyncDisabled: true}); err != nil {
				return err
			}

			st.servers = nil

			continue
		}

		if !slices.Equal(st.servers, s.servers) { // new servers: ask them now
			st.servers, st.nextQuery, st.poll, st.retry = s.servers, time.Time{}, 0, 0
		}

		// A query of servers no longer configured goes on beside the new one; its answer is
		// dropped.
		if !slices.Equal(st.asking, st.servers) && !time.Now().Before(st.nextQuery) {
			st.asking = st.servers

			go func(servers []string) {
				server, offset, err := query(servers)

				select {
				case answers <- answer{servers: servers, server: server, offset: offset, err: err}:
				case <-ctx.Done():
				}
			}(st.servers)
		}

		next := max(time.Until(st.nextQuery), 0)
		if st.asking != nil {
			next = time.Hour // the answer wakes the loop
		}

		if !st.synced && s.bootTimeout > 0 {
			if left := s.bootTimeout - time.Since(started); left <= 0 {
				if !st.timedOutUnsynced {
					log.Warn("time is not synced yet: the boot goes on as machine.time.bootTimeout has passed", zap.Duration("bootTimeout", s.bootTimeout))
				}

				st.timedOutUnsynced = true
			} else {
				next = min(next, left)
			}
		}

		wake.Reset(next)

		if err = writeStatus(ctx, r, timeres.StatusSpec{Synced: st.synced || st.timedOutUnsynced, Epoch: st.epoch}); err != nil {
			return err
		}
	}
}

// syncState is what the sync loop keeps from one round to the next.
type syncState struct {
	synced           bool
	epoch            int
	servers          []string
	nextQuery        time.Time
	poll, retry      time.Duration
	failing          bool
	asking           []string // the servers of the query under way
	timedOutUnsynced bool
}

// take takes a query's answer: the clock is adjusted and the next query is a poll away, or,
// on an error, a backed-off retry away. An answer from servers no longer configured is dropped.
func (st *syncState) take(a answer, adjust func(time.Duration) error, log *zap.Logger) error {
	if slices.Equal(a.servers, st.asking) {
		st.asking = nil
	}

	switch {
	case !slices.Equal(a.servers, st.servers): // asked before a config change
	case a.err != nil:
		st.retry = min(max(2*st.retry, time.Second), maxRetry)
		st.nextQuery = time.Now().Add(st.retry)

		if !st.failing || st.retry == maxRetry {
			log.Warn("time sync failed: retrying", zap.Error(a.err), zap.Duration("retry", st.retry))
		}

		st.failing = true
	default:
		if err := adjust(a.offset); err != nil {
			return fmt.Errorf("adjusting the clock by %s: %w", a.offset, err)
		}

		if a.offset.Abs() > epochJump {
			st.epoch++
		}

		if !st.synced || a.offset.Abs() >= StepThreshold {
			log.Info("time synced", zap.String("server", a.server), zap.Duration("offset", a.offset))
		}

		if a.offset.Abs() >= StepThreshold || st.poll == 0 {
			st.poll = MinPoll
		} else {
			st.poll = min(2*st.poll, MaxPoll)
		}

		st.synced, st.failing, st.retry, st.nextQuery = true, false, 0, time.Now().Add(st.poll)
	}

	return nil
}

// writeServers publishes the time servers the node uses (the config's, the platform's or the default).
func writeServers(ctx context.Context, r controller.Runtime, servers []string) error {
	if err := safe.WriterModify(ctx, r, network.NewTimeServerStatus(network.NamespaceName, network.TimeServerID), func(res *network.TimeServerStatus) error {
		res.TypedSpec().NTPServers = slices.Clone(servers)

		return nil
	}); err != nil {
		return fmt.Errorf("writing the time servers: %w", err)
	}

	return nil
}

func writeStatus(ctx context.Context, r controller.Runtime, spec timeres.StatusSpec) error {
	if err := safe.WriterModify(ctx, r, timeres.NewStatus(), func(res *timeres.Status) error {
		*res.TypedSpec() = spec

		return nil
	}); err != nil {
		return fmt.Errorf("writing the time status: %w", err)
	}

	return nil
}

// query asks the servers in order and returns the first valid answer's clock offset.
func query(servers []string) (string, time.Duration, error) {
	var errs []string

	for _, server := range servers {
		if strings.HasPrefix(server, "/dev/") {
			errs = append(errs, server+": PTP clocks are not supported yet: name an NTP server")

			continue
		}

		resp, err := ntp.QueryWithOptions(server, ntp.QueryOptions{Timeout: queryTimeout})
		if err == nil {
			err = resp.Validate()
		}

		if err == nil {
			return server, resp.ClockOffset, nil
		}

		errs = append(errs, fmt.Sprintf("%s: %v", server, err))
	}

	return "", 0, fmt.Errorf("no NTP server answered (machine.time.servers): %s", strings.Join(errs, "; "))
}
