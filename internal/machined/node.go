package machined

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"

	cosiruntime "github.com/cosi-project/runtime/pkg/controller/runtime"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/config"
	configres "github.com/siderolabs/talos/pkg/machinery/resources/config"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/siderolabs/talos/pkg/machinery/resources/v1alpha1"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sys/unix"

	"github.com/talos-go/talos/internal/container"
	"github.com/talos-go/talos/internal/machined/controllers"
	"github.com/talos-go/talos/internal/machined/events"
	"github.com/talos-go/talos/internal/machined/resources"
	"github.com/talos-go/talos/internal/machined/runtime"
	"github.com/talos-go/talos/internal/machined/sequencer"
	"github.com/talos-go/talos/internal/machined/server"
	"github.com/talos-go/talos/internal/machined/services"
	"github.com/talos-go/talos/internal/machined/system"
	"github.com/talos-go/talos/internal/machined/system/logging"
	"github.com/talos-go/talos/internal/machined/system/logsend"
	"github.com/talos-go/talos/internal/machined/upgrade"
	"github.com/talos-go/talos/internal/metal"
	"github.com/talos-go/talos/internal/platform"
	"github.com/talos-go/talos/internal/slots"
)

type powerAction int

const (
	actionNone powerAction = iota
	actionShutdown
	actionReboot
)

// node is one running machined.
type node struct {
	opts Options
	r    *runtime.Runtime

	dnsLog      *zap.Logger      // the host DNS log (dns-resolve-cache)
	console     io.Writer        // machined's console: the kernel's log on metal, else stderr
	logSender   *logsend.Sender  // machine.logging.destinations of the active config
	power       chan powerAction // reboot/shutdown requests from the API
	configReady chan struct{}    // closed once maintenance mode gets a config
	readyOnce   sync.Once

	applyMu   sync.Mutex // serializes config changes
	tryRevert *time.Timer

	svcUpdates chan system.Info

	owned       *group           // goroutines started by the sequences
	upgrades    *upgrade.Manager // upgrades, rollbacks and resets
	interrupted powerAction      // a power action that ended maintenance mode
}

func newNode(opts Options) (*node, error) {
	paths := runtime.Paths{Root: opts.StateDir}

	for _, dir := range []string{paths.State(), paths.Ephemeral(), paths.Boot(), paths.Meta(), paths.System()} {
		if fi, err := os.Stat(dir); err == nil && fi.Mode()&os.ModeDevice != 0 {
			continue // an installed metal node's META partition
		}

		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("creating node folder %s: %w", dir, err)
		}
	}

	binary, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding own binary: %w", err)
	}

	n := &node{
		opts:        opts,
		power:       make(chan powerAction, 1),
		configReady: make(chan struct{}),
		svcUpdates:  make(chan system.Info, 256),
	}
	n.r = &runtime.Runtime{Mode: runtime.DetectMode(opts.Platform, opts.StateDir), Address: opts.Address, Paths: paths, Binary: binary, Events: events.NewBus(),
		CertLifetime: opts.CertLifetime}
	n.r.Etcd = services.NewEtcdManager(n.r)

	return n, nil
}

// lock makes sure only one machined uses a state folder; the lock ends with the process (or
// its re-exec on reboot, since the descriptor is close-on-exec).
func (n *node) lock() error {
	path := n.r.Paths.System() + "/machined.lock"

	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("opening lock %s: %w", path, err)
	}

	if err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()

		return fmt.Errorf("another machined is running with state folder %s: stop it first", n.opts.StateDir)
	}

	// Keep f open for the life of the process.
	lockFile = f

	return nil
}

var lockFile *os.File //nolint:unused // held so the lock outlives the function (a dropped File closes its fd)

func (n *node) setupLogging() error {
	logs, err := logging.NewManager(n.r.Paths.Logs())
	if err != nil {
		return err
	}

	n.r.Logs = logs

	w, err := logs.Writer("machined")
	if err != nil {
		return err
	}

	enc := zap.NewDevelopmentEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	// On metal the log goes to the kernel's, whose console shows it with the kernel's
	// timestamps; elsewhere to stderr.
	var console io.Writer = os.Stderr

	if n.r.Mode.OwnsMachine() {
		if kmsg, err := metal.OpenKmsg(); err == nil {
			console = kmsg
		}
	}

	n.console = console
	core := zapcore.NewCore(zapcore.NewConsoleEncoder(enc), zapcore.AddSync(io.MultiWriter(console, w)), zap.InfoLevel)
	n.r.Log = zap.New(core).With(zap.String("node", n.opts.Address))

	// The host DNS logs on its own, as upstream's: `talosctl logs dns-resolve-cache`.
	dnsLog, err := logs.Writer("dns-resolve-cache")
	if err != nil {
		return err
	}

	n.dnsLog = zap.New(zapcore.NewCore(zapcore.NewConsoleEncoder(enc), zapcore.AddSync(dnsLog), zap.InfoLevel))

	return nil
}

// run boots the node and serves until a shutdown, reboot or signal. The sequences are declared
// in internal/machined/sequencer; their tasks are in tasks.go.
func (n *node) run(ctx context.Context) (powerAction, error) {
	if err := n.lock(); err != nil {
		return actionNone, err
	}

	if err := n.setupLogging(); err != nil {
		return actionNone, err
	}
	defer n.r.Logs.Close()

	// Everything the sequences start is owned by this group and ends with it.
	n.owned = newGroup(n.r.Log)
	defer n.owned.stop()

	n.r.Supervisor = system.NewSupervisor(n.r.Log.Named("supervisor"), n.onServiceState)

	n.upgrades = n.newUpgrades()
	defer n.upgrades.Close()

	if err := n.runSequence(ctx, sequencer.Boot(n)); err != nil {
		return actionNone, err
	}

	if n.r.Config() == nil {
		if err := n.runSequence(ctx, sequencer.Maintenance(n)); err != nil {
			return actionNone, err
		}

		if n.interrupted != actionNone {
			return n.stop(n.interrupted)
		}
	}

	if n.needsInstall() {
		err := n.runSequence(ctx, sequencer.Install(n))
		if err == nil {
			return n.stop(actionReboot)
		}

		n.r.Log.Error("install failed: the node runs from memory (fix machine.install and apply the config again)", zap.Error(err))
	}

	if err := n.runSequence(ctx, sequencer.Start(n)); err != nil {
		return actionNone, err
	}

	select {
	case <-ctx.Done():
		return n.stop(actionShutdown)
	case action := <-n.power:
		return n.stop(action)
	}
}

func (n *node) runSequence(ctx context.Context, seq sequencer.Sequence) error {
	return seq.Run(ctx, n.r.Events, n.r.Log, "")
}

// stop runs the shutdown (or reboot) sequence: services stop in reverse dependency order.
func (n *node) stop(action powerAction) (powerAction, error) {
	seq, stage := sequencer.Shutdown(n), runtimeres.MachineStageShuttingDown
	if action == actionReboot {
		seq, stage = sequencer.Reboot(n), runtimeres.MachineStageRebooting
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	n.setMachineStage(ctx, stage, false)

	return action, n.runSequence(ctx, seq)
}

// group owns the node's long-running goroutines: stop cancels them and waits for them.
type group struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	log    *zap.Logger
}

func newGroup(log *zap.Logger) *group {
	ctx, cancel := context.WithCancel(context.Background())

	return &group{ctx: ctx, cancel: cancel, log: log}
}

// goOwned runs fn until the group stops; a failure before that is logged.
func (g *group) goOwned(name string, fn func(ctx context.Context) error) {
	g.wg.Add(1)

	go func() {
		defer g.wg.Done()

		if err := fn(g.ctx); err != nil && g.ctx.Err() == nil {
			g.log.Error("component failed", zap.String("component", name), zap.Error(err))
		}
	}()
}

func (g *group) stop() {
	g.cancel()
	g.wg.Wait()
}

// StartResources creates the resource state and runs the controllers.
func (n *node) StartResources(ctx context.Context) error {
	// The types this kind of node fills: another answers NotFound (resources.For).
	st, err := resources.NewNodeState(ctx, n.r.Mode.Node())
	if err != nil {
		return err
	}

	n.r.State = st

	if err = server.SyncMetaKeys(ctx, st, n.r.Paths.Meta()); err != nil {
		return fmt.Errorf("publishing META keys: %w", err)
	}

	// A schematic that does not read hides which schematic the node runs, but the node runs.
	if err = server.SyncSchematic(ctx, st, n.r.Paths.Boot(), slots.Current()); err != nil {
		n.r.Log.Warn("publishing the image's schematic", zap.Error(err))
	}

	rt, err := cosiruntime.NewRuntime(st, n.r.Log.Named("controllers").WithOptions(zap.IncreaseLevel(zap.WarnLevel)))
	if err != nil {
		return fmt.Errorf("creating controller runtime: %w", err)
	}

	if _, err = netip.ParseAddr(n.opts.Address); err != nil && n.r.Mode.InContainer() {
		return fmt.Errorf("parsing node address: %w", err)
	}

	// What the platform said at boot (metal's initramfs wrote it; internal/platform).
	var published *platform.Published

	if n.r.Mode.OwnsMachine() {
		p, ok, err := platform.Read(filepath.Join(n.r.Paths.Root, container.InitramfsDir, platform.File))
		if err != nil {
			return err
		}

		if ok {
			published, n.r.PlatformName = &p, p.Metadata.Platform
		}
	}

	if err = controllers.Register(rt, controllers.Options{
		Address:          n.opts.Address,
		Mode:             n.r.Mode,
		DHCPLinks:        bootDHCPLinks(n.r.Mode, published, false),
		DHCP6Links:       bootDHCPLinks(n.r.Mode, published, true),
		LoadModule:       metal.LoadModule,
		LoadModuleWith:   metal.LoadModuleWith,
		LoadModalias:     metal.LoadForModalias,
		StateDir:         n.r.Paths.State(),
		APIDSecretsDir:   n.r.Paths.Secrets("apid"),
		TrustdSecretsDir: n.r.Paths.Secrets("trustd"),

		KubernetesSecretsDir: n.r.Paths.Secrets("kubernetes"),
		KubeletDir:           n.r.Paths.KubernetesConfig(),
		KubernetesConfigDir:  n.r.Paths.KubernetesComponentConfig(),
		AuditLogDir:          n.r.Paths.KubernetesAuditLogs(),
		CertLifetime:         n.r.CertLifetime,
		Etcd:                 n.r.Etcd,
		EtcdClient:           func(context.Context) (*clientv3.Client, error) { return n.r.Etcd.LocalClient() },
		Root:                 n.r.Paths.Root,
		TimeLog:              n.r.Log.Named("time"),
		DNSLog:               n.dnsLog,
		RegistryHostsDir:     services.NewContainerdPaths(n.r.Paths).RegistryHosts,
		Events:               n.r.Events,
		Platform:             published,
	}); err != nil {
		return err
	}

	n.r.Controllers = rt

	n.owned.goOwned("controller runtime", rt.Run)
	n.owned.goOwned("service resources", n.writeServiceResources)

	return nil
}

// onServiceState publishes a service's state change and queues its resource update. It is
// called under the supervisor's lock, so it only hands off.
func (n *node) onServiceState(id string, ev system.StateEvent, h system.Health) {
	n.r.Events.Publish(&machine.ServiceStateEvent{
		Service: id, Action: serviceAction(ev.State), Message: ev.Message, Health: server.HealthInfo(h),
	}, "")

	select {
	case n.svcUpdates <- system.Info{ID: id, State: ev.State, Health: h}:
	default: // the writer is behind; a later update will carry the state
	}
}

func serviceAction(st system.State) machine.ServiceStateEvent_Action {
	switch st {
	case system.StateInitialized:
		return machine.ServiceStateEvent_INITIALIZED
	case system.StatePreparing:
		return machine.ServiceStateEvent_PREPARING
	case system.StateWaiting:
		return machine.ServiceStateEvent_WAITING
	case system.StateRunning:
		return machine.ServiceStateEvent_RUNNING
	case system.StateStopping:
		return machine.ServiceStateEvent_STOPPING
	case system.StateFinished:
		return machine.ServiceStateEvent_FINISHED
	case system.StateFailed:
		return machine.ServiceStateEvent_FAILED
	case system.StateSkipped:
		return machine.ServiceStateEvent_SKIPPED
	}

	return machine.ServiceStateEvent_INITIALIZED
}

// writeServiceResources mirrors running services into Service resources (runtime namespace).
// The services' states also make MachineStatus's services condition.
func (n *node) writeServiceResources(ctx context.Context) error {
	states := map[string]system.Info{}

	for {
		select {
		case <-ctx.Done():
			return nil
		case info := <-n.svcUpdates:
			states[info.ID] = info
			n.setServicesCondition(ctx, states)

			// As upstream's: a Service resource exists while its service runs, and is
			// removed on any other state (waiting, finished, failed, skipped).
			if info.State != system.StateRunning {
				if err := n.r.State.Destroy(ctx, v1alpha1.NewService(info.ID).Metadata()); err != nil && !state.IsNotFoundError(err) && ctx.Err() == nil {
					n.r.Log.Warn("removing service resource", zap.String("service", info.ID), zap.Error(err))
				}

				continue
			}

			if err := safe.StateModify(ctx, n.r.State, v1alpha1.NewService(info.ID), func(res *v1alpha1.Service) error {
				spec := res.TypedSpec()
				spec.Running = true
				spec.Healthy = info.Health.Healthy
				spec.Unknown = info.Health.Unknown

				return nil
			}); err != nil && ctx.Err() == nil {
				n.r.Log.Warn("updating service resource", zap.String("service", info.ID), zap.Error(err))
			}
		}
	}
}

func (n *node) setMachineStage(ctx context.Context, stage runtimeres.MachineStage, ready bool) {
	if n.r.State == nil {
		return
	}

	if err := safe.StateModify(ctx, n.r.State, runtimeres.NewMachineStatus(), func(res *runtimeres.MachineStatus) error {
		res.TypedSpec().Stage = stage
		res.TypedSpec().Status.Ready = ready && len(res.TypedSpec().Status.UnmetConditions) == 0 // e.g. a slot on trial

		return nil
	}); err != nil {
		n.r.Log.Warn("updating machine status", zap.Error(err))
	}
}

// activate makes cfg the node's config: in memory and as the MachineConfig resource.
func (n *node) activate(ctx context.Context, cfg config.Provider) error {
	n.r.SetConfig(cfg)

	res := configres.NewMachineConfig(cfg)

	old, err := n.r.State.Get(ctx, res.Metadata())

	switch {
	case state.IsNotFoundError(err):
		err = n.r.State.Create(ctx, res)
	case err == nil:
		res.Metadata().SetVersion(old.Metadata().Version())
		err = n.r.State.Update(ctx, res)
	}

	if err != nil {
		return fmt.Errorf("publishing machine config: %w", err)
	}

	// machine.logging changes live, as upstream's: a destination that cannot be used does not
	// stop the node (validation refuses most).
	if err = n.sendLogs(cfg); err != nil {
		n.r.Log.Error("machine.logging: logs are not sent", zap.Error(err))
	}

	return nil
}
