// Package machined is the node's init: it boots the node, supervises services and serves the
// machine API.
package machined

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/talos-go/talos/internal/bootloader"
	"github.com/talos-go/talos/internal/container"
	"github.com/talos-go/talos/internal/machined/reaper"
	"github.com/talos-go/talos/internal/machined/runtime"
	"github.com/talos-go/talos/internal/metal"
	"github.com/talos-go/talos/internal/runtimestats"
)

// Options are machined's command-line settings.
type Options struct {
	Platform   string
	StateDir   string
	Address    string
	ConfigFile string
	// CertLifetime is the lifetime of the certificates the node issues itself and its trustd
	// signs; zero: a day. Its flag is hidden: tests shorten it to watch rotation.
	CertLifetime time.Duration
}

// certLifetimeFlag is hidden from the usage text: only tests set it.
const certLifetimeFlag = "cert-lifetime"

// Main runs machined with its command-line arguments.
func Main(args []string) error {
	fs := flag.NewFlagSet("machined", flag.ContinueOnError)

	var opts Options

	fs.StringVar(&opts.Platform, "platform", runtime.PlatformContainer, "platform: container (a process on this host) or metal")
	fs.StringVar(&opts.StateDir, "state", "", "state folder, standing for the node's disk (container mode)")
	fs.StringVar(&opts.Address, "address", "", "node address to bind to (container mode), e.g. 127.5.0.2")
	fs.StringVar(&opts.ConfigFile, "config", "", "machine config to apply on first boot; without one the node waits in maintenance mode")
	fs.DurationVar(&opts.CertLifetime, certLifetimeFlag, 0, "lifetime of the node's certificates, e.g. 10s (tests watching rotation); 0: a day")
	fs.Usage = func() { usage(fs, certLifetimeFlag) }

	if err := fs.Parse(args); err != nil {
		return err
	}

	if err := opts.check(); err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	// As a node's init, machined inherits the node's orphans (containerd's shims among them).
	runtimestats.OnSignal(ctx, os.Stderr)

	n, err := newNode(opts)
	if err != nil {
		return err
	}

	// Orphans come to the init of a pid namespace only.
	if n.r.Mode.PID1 {
		go reaper.Run(ctx, func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) })
	}

	action, err := n.run(ctx)
	if err != nil {
		return err
	}

	// On its own kernel, machined is the machine's init: it reboots or powers it off (an init
	// that exits panics the kernel).
	if n.r.Mode.OwnsMachine() {
		return metal.Power(action == actionReboot)
	}

	if action == actionReboot {
		if n.r.Mode.ContainerNode() {
			return container.Reboot()
		}

		if bootloader.UnderBootStage() {
			// Under the boot stage a reboot goes through it: it picks the slot to boot.
			os.Exit(bootloader.ExitReboot)
		}

		// Container mode reboot: the node process restarts in place, keeping its PID.
		self, err := os.Executable()
		if err != nil {
			return fmt.Errorf("reboot: finding own binary: %w", err)
		}

		return syscall.Exec(self, os.Args, os.Environ())
	}

	return nil
}

// usage prints fs's usage as the flag package does, without the hidden flags.
func usage(fs *flag.FlagSet, hidden ...string) {
	visible := flag.NewFlagSet(fs.Name(), flag.ContinueOnError)
	visible.SetOutput(fs.Output())
	fs.VisitAll(func(f *flag.Flag) {
		if !slices.Contains(hidden, f.Name) {
			visible.Var(f.Value, f.Name, f.Usage)
			visible.Lookup(f.Name).DefValue = f.DefValue
		}
	})

	fmt.Fprintf(fs.Output(), "Usage of %s:\n", fs.Name())
	visible.PrintDefaults()
}

func (o *Options) check() error {
	if o.CertLifetime < 0 {
		return fmt.Errorf("--%s %s is negative: give a duration like 10s, or 0 for a day", certLifetimeFlag, o.CertLifetime)
	}

	switch o.Platform {
	case runtime.PlatformContainer:
		if o.StateDir == "" {
			return errors.New("--state is required in container mode: the folder that stands for the node's disk")
		}

		if o.Address == "" {
			return errors.New("--address is required in container mode: the loopback address of this node, e.g. 127.5.0.2")
		}

		if _, err := netip.ParseAddr(o.Address); err != nil {
			return fmt.Errorf("--address %q is not an IP address: give one like 127.5.0.2", o.Address)
		}
	case runtime.PlatformMetal:
		if o.StateDir == "" {
			o.StateDir = "/"
		}
	default:
		return fmt.Errorf("--platform %q is unknown: use container or metal", o.Platform)
	}

	abs, err := filepath.Abs(o.StateDir)
	if err != nil {
		return fmt.Errorf("--state %q: %w", o.StateDir, err)
	}

	o.StateDir = abs

	return nil
}
