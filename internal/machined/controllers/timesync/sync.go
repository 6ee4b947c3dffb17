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
		started          = time.Now()
		synced           bool
		epoch            int
		servers          []string
		nextQuery        time.Time
		poll, retry      time.Duration
		failing          bool
		asking           []string // the servers of the query under way
		answers          = make(chan answer)
		wake             = time.NewTimer(time.Hour)
		timedOutUnsynced bool
	)

	defer wake.Stop()

	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.EventCh():
		case <-wake.C:
		case a := <-answers:
			if slices.Equal(a.servers, asking) {
				asking = nil
			}

			switch {
			case !slices.Equal(a.servers, servers): // asked before a config change
			case a.err != nil:
				retry = min(max(2*retry, time.Second), maxRetry)
				nextQuery = time.Now().Add(retry)

				if !failing || retry == maxRetry {
					log.Warn("time sync failed: retrying", zap.Error(a.err), zap.Duration("retry", retry))
				}

				failing = true
			default:
				if err := adjust(a.offset); err != nil {
					return fmt.Errorf("adjusting the clock by %s: %w", a.offset, err)
				}

				if a.offset.Abs() > epochJump {
					epoch++
				}

				if !synced || a.offset.Abs() >= StepThreshold {
					log.Info("time synced", zap.String("server", a.server), zap.Duration("offset", a.offset))
				}

				if a.offset.Abs() >= StepThreshold || poll == 0 {
					poll = MinPoll
				} else {
					poll = min(2*poll, MaxPoll)
				}

				synced, failing, retry, nextQuery = true, false, 0, time.Now().Add(poll)
			}
		}

		s, err := ctrl.settings(ctx, r)
		if err != nil {
			return err
		}

		if err = safe.WriterModify(ctx, r, network.NewTimeServerStatus(network.NamespaceName, network.TimeServerID), func(res *network.TimeServerStatus) error {
			res.TypedSpec().NTPServers = slices.Clone(s.servers)

			return nil
		}); err != nil {
			return fmt.Errorf("writing the time servers: %w", err)
		}

		if !ctrl.Sync || s.disabled {
			if err = writeStatus(ctx, r, timeres.StatusSpec{Synced: true, Epoch: epoch, SyncDisabled: true}); err != nil {
				return err
			}

			servers = nil

			continue
		}

		if !slices.Equal(servers, s.servers) { // new servers: ask them now
			servers, nextQuery, poll, retry = s.servers, time.Time{}, 0, 0
		}

		// A query of servers no longer configured goes on beside the new one; its answer is
		// dropped.
		if !slices.Equal(asking, servers) && !time.Now().Before(nextQuery) {
			asking = servers

			go func(servers []string) {
				server, offset, err := query(servers)

				select {
				case answers <- answer{servers: servers, server: server, offset: offset, err: err}:
				case <-ctx.Done():
				}
			}(servers)
		}

		next := max(time.Until(nextQuery), 0)
		if asking != nil {
			next = time.Hour // the answer wakes the loop
		}

		if !synced && s.bootTimeout > 0 {
			if left := s.bootTimeout - time.Since(started); left <= 0 {
				if !timedOutUnsynced {
					log.Warn("time is not synced yet: the boot goes on as machine.time.bootTimeout has passed", zap.Duration("bootTimeout", s.bootTimeout))
				}

				timedOutUnsynced = true
			} else {
				next = min(next, left)
			}
		}

		wake.Reset(next)

		if err = writeStatus(ctx, r, timeres.StatusSpec{Synced: synced || timedOutUnsynced, Epoch: epoch}); err != nil {
			return err
		}
	}
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
