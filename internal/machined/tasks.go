package machined

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"github.com/google/uuid"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"go.uber.org/zap"

	"github.com/talos-go/talos/internal/apid"
	"github.com/talos-go/talos/internal/machined/sequencer"
	"github.com/talos-go/talos/internal/machined/server"
	"github.com/talos-go/talos/internal/machined/services"
	"github.com/talos-go/talos/internal/machined/system/logsend"
	"github.com/talos-go/talos/internal/machined/userfiles"
)

// The tasks of the node's sequences (internal/machined/sequencer); StartResources is in
// node.go and LoadConfig in config.go.
var _ sequencer.Machine = (*node)(nil)

// WriteRunFiles writes the pid file and a new boot id. Neither is needed to boot: a failure
// is logged.
func (n *node) WriteRunFiles(context.Context) error {
	log := n.r.Log

	if err := os.MkdirAll(filepath.Dir(n.r.Paths.PIDFile()), 0o700); err != nil {
		log.Warn("creating the run folder", zap.Error(err))
	}

	if err := os.WriteFile(n.r.Paths.PIDFile(), fmt.Appendf(nil, "%d\n", os.Getpid()), 0o600); err != nil {
		log.Warn("writing pid file", zap.Error(err))
	}

	if err := os.WriteFile(n.r.Paths.BootIDFile(), []byte(uuid.NewString()+"\n"), 0o644); err != nil {
		log.Warn("writing boot id", zap.Error(err))
	}

	return nil
}

// StartMachineAPI serves the machine API on the node's socket.
func (n *node) StartMachineAPI(context.Context) error {
	api := &server.Machine{R: n.r, Lifecycle: n, Upgrades: n.upgrades}

	n.owned.goOwned("machine API", func(ctx context.Context) error { return server.Serve(ctx, api, n.r.Paths.MachinedSocket()) })

	return nil
}

// EnterMaintenance marks the node as in maintenance; a boot that gets this far counts as good.
func (n *node) EnterMaintenance(context.Context) error {
	n.setMachineStage(n.owned.ctx, runtimeres.MachineStageMaintenance, false)
	n.r.Log.Info("no config: waiting in maintenance mode for apply-config")
	n.upgrades.BootSucceeded()

	return nil
}

// ServeMaintenance serves the maintenance API (port 50000, server certificate only) until a
// config is applied, or a shutdown or reboot ends the wait (recorded in n.interrupted). apid,
// with full mTLS, takes the port over afterwards.
func (n *node) ServeMaintenance(ctx context.Context) error {
	mctx, stopMaintenance := context.WithCancel(n.owned.ctx)
	done := make(chan struct{})

	go func() {
		defer close(done)

		if err := apid.ServeMaintenance(mctx, apid.MaintenanceOptions{
			Listen:         net.JoinHostPort(n.opts.Address, strconv.Itoa(constants.ApidPort)),
			MachinedSocket: n.r.Paths.MachinedSocket(),
			Log:            n.r.Log.Named("maintenance"),
		}); err != nil && mctx.Err() == nil {
			n.r.Log.Error("maintenance API failed", zap.Error(err))
		}
	}()

	defer func() {
		stopMaintenance()
		<-done
	}()

	select {
	case <-ctx.Done():
		n.interrupted = actionShutdown
	case action := <-n.power:
		n.interrupted = action
	case <-n.configReady:
	}

	return nil
}

// WriteUserFiles carries out machine.files (upstream's /var files and the CRI config part)
// and, on a node whose init machined is, sets machine.env on it (upstream sets it on PID 1; the
// services get it from their runners). A file that cannot be written is logged with its
// machine.files index and the boot goes on: the node stays reachable to fix the config.
func (n *node) WriteUserFiles(context.Context) error {
	cfg := n.r.Config()
	if cfg == nil || cfg.Machine() == nil {
		return nil
	}

	files, err := cfg.Machine().Files()
	if err == nil {
		err = userfiles.Write(files, n.r.Paths.Ephemeral(), services.NewContainerdPaths(n.r.Paths).CRIParts)
	}

	if err != nil {
		n.r.Log.Error("machine.files", zap.Error(err))
	}

	if n.r.Mode.PID1 {
		for k, v := range cfg.Machine().Env() {
			if err = os.Setenv(k, v); err != nil {
				n.r.Log.Error("machine.env", zap.String("name", k), zap.Error(err))
			}
		}
	}

	return nil
}

// StartServices starts the services of the node's machine type, once the MachineType
// resource says what it is.
func (n *node) StartServices(ctx context.Context) error {
	t, err := n.r.WaitMachineType(ctx)
	if err != nil {
		return err
	}

	// The config's debug: the services' logs on the console too, as upstream's.
	if cfg := n.r.Config(); cfg != nil && cfg.Debug() {
		n.r.Logs.SetConsole(n.console)
		n.r.Log.Info("debug: the services' logs go to the console too")
	}

	// Out of the root cgroup first, so the services' cgroups get their memory figures.
	if err = services.EnterInitCgroup(n.r, os.Getpid()); err != nil {
		n.r.Log.Warn("machined's cgroup: the services run in machined's", zap.Error(err))
	}

	n.r.Supervisor.Load(services.For(n.r, t)...)

	return n.r.Supervisor.Start()
}

// sendLogs sends every log line to the config's machine.logging.destinations, in place of
// the previous config's.
func (n *node) sendLogs(cfg config.Provider) error {
	var dests []logsend.Destination

	if cfg != nil && cfg.Machine() != nil {
		for _, d := range cfg.Machine().Logging().Destinations() {
			dests = append(dests, logsend.Destination{Endpoint: d.Endpoint(), ExtraTags: d.ExtraTags()})
		}
	}

	// The same destinations: the sender keeps its connections and what it has queued.
	if n.logSender != nil && n.logSender.Sends(dests) {
		return nil
	}

	old := n.logSender
	n.logSender = nil
	n.r.Logs.SetForward(nil)

	if old != nil {
		old.Close()
	}

	if len(dests) == 0 {
		return nil
	}

	sender, err := logsend.New(dests)
	if err != nil {
		return err
	}

	n.logSender = sender
	n.r.Logs.SetForward(sender.Send)
	n.r.Log.Info("logs are sent to the machine.logging destinations", zap.Int("destinations", len(dests)))

	return nil
}

// MarkRunning marks the node as running; the boot counts as good once the services it must
// have are up (upgrade.Manager.BootSucceeded).
func (n *node) MarkRunning(context.Context) error {
	n.setMachineStage(n.owned.ctx, runtimeres.MachineStageRunning, true)
	n.r.Log.Info("node is running", zap.String("address", n.opts.Address))
	n.upgrades.BootSucceeded()

	return nil
}

// StopServices stops every service in reverse dependency order.
func (n *node) StopServices(ctx context.Context) error { return n.r.Supervisor.StopAll(ctx) }
