package apid

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/talos-go/talos/internal/apid/certs"
	"github.com/talos-go/talos/internal/runtimestats"
)

// ProcessOptions configure apid run as its own process (Main's flags).
type ProcessOptions struct {
	// Listen is the address:port served (the node address, port 50000).
	Listen string
	// CertDir is apid's certificate folder.
	CertDir string
	// MachinedSocket is machined's API socket.
	MachinedSocket string
	// LocalAddresses mean this node, besides Listen's host.
	LocalAddresses []string
	// ReloadInterval is how often the certificate folder is checked for rotated files.
	ReloadInterval time.Duration
	// DialTimeout bounds one connection attempt to another node.
	DialTimeout time.Duration
	// RemotePort is other nodes' apid port.
	RemotePort int
	// Reload re-reads the certificate folder on each receive (Main sends SIGHUP here).
	Reload <-chan os.Signal
	// Log receives the log; never keys.
	Log *zap.Logger
}

// Main runs apid as its own process until SIGTERM or SIGINT; SIGHUP reloads the certificates:
//
//	apid --listen ADDR:50000 --certs DIR --socket MACHINED_SOCKET --local-address ADDR...
func Main(args []string) error {
	opts, err := parseFlags(args)
	if err != nil {
		return err
	}

	if opts.Log, err = zap.NewProduction(); err != nil {
		return err
	}

	defer opts.Log.Sync()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)

	defer signal.Stop(hup)

	opts.Reload = hup

	runtimestats.OnSignal(ctx, os.Stderr)

	return run(ctx, opts)
}

// parseFlags reads Main's command line.
func parseFlags(args []string) (ProcessOptions, error) {
	fs := flag.NewFlagSet("apid", flag.ContinueOnError)

	var (
		opts  ProcessOptions
		local listFlag
	)

	fs.StringVar(&opts.Listen, "listen", "", "address:port to serve on (the node address, port 50000)")
	fs.StringVar(&opts.CertDir, "certs", "", "apid's certificate folder")
	fs.StringVar(&opts.MachinedSocket, "socket", "", "machined's API socket")
	fs.Var(&local, "local-address", "address or name meaning this node (repeatable, comma-separated)")
	fs.DurationVar(&opts.ReloadInterval, "reload-interval", time.Second, "how often the certificate folder is checked for rotated files")
	fs.DurationVar(&opts.DialTimeout, "dial-timeout", 5*time.Second, "timeout of one connection attempt to another node")
	fs.IntVar(&opts.RemotePort, "remote-port", 50000, "other nodes' apid port")

	if err := fs.Parse(args); err != nil {
		return opts, err
	}

	if opts.Listen == "" || opts.CertDir == "" || opts.MachinedSocket == "" {
		return opts, errors.New("--listen, --certs and --socket are required")
	}

	opts.LocalAddresses = local

	return opts, nil
}

// run serves until ctx ends (then drains calls for up to 5s and returns nil) or serving fails.
func run(ctx context.Context, opts ProcessOptions) error {
	log := opts.Log
	if log == nil {
		log = zap.NewNop()
	}

	store, err := certs.NewStore(opts.CertDir)
	if err != nil {
		return fmt.Errorf("loading certificates: %w", err)
	}

	local := opts.LocalAddresses
	if host, _, err := net.SplitHostPort(opts.Listen); err == nil && host != "" {
		local = append(local[:len(local):len(local)], host)
	}

	srv, err := New(Options{
		Certs:          store,
		MachinedSocket: opts.MachinedSocket,
		LocalAddresses: local,
		RemotePort:     opts.RemotePort,
		DialTimeout:    opts.DialTimeout,
		Log:            log,
	})
	if err != nil {
		return err
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	// The maintenance API may still be handing the port over.
	l, err := listenRetry(ctx, opts.Listen)
	if err != nil {
		return err
	}

	logReload := func(reloaded bool, err error) {
		if err != nil {
			log.Warn("certificate reload failed, keeping the current certificates", zap.Error(err))
		} else if reloaded {
			log.Info("certificates reloaded")
		}
	}

	var wg sync.WaitGroup

	defer wg.Wait()
	defer cancel() // before the Wait: the watcher ends with ctx

	wg.Go(func() { store.Watch(ctx, opts.ReloadInterval, logReload) })

	served := make(chan error, 1)

	wg.Go(func() { served <- srv.Serve(l) })

	log.Info("apid serving", zap.String("address", opts.Listen), zap.Strings("local", local))

	for {
		select {
		case err = <-served:
			return err
		case <-opts.Reload:
			logReload(store.Reload())
		case <-ctx.Done():
			log.Info("stopping", zap.NamedError("reason", context.Cause(ctx)))
			srv.Stop(5 * time.Second)

			return nil
		}
	}
}

// listFlag is a repeatable, comma-separated flag.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}

	return nil
}
