package trustd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// Port is trustd's port.
const Port = 50001

// Options are trustd's settings.
type Options struct {
	Listen   string        // address:port to serve on
	Dir      string        // the secrets folder: CA, token, serving certificate
	Joins    string        // the join request folder (join by approval); none: refused
	Lifetime time.Duration // of signed certificates
	Reload   time.Duration // how often the folder is checked for rotated files
	Burst    int           // failed attempts a peer may make before it is slowed down
	Refill   time.Duration // a peer gets one more failed attempt per this interval

	// ReloadNow, when set, reloads the secrets at once on each receive (SIGHUP).
	ReloadNow <-chan os.Signal
}

// Main runs trustd as its own process until SIGTERM or SIGINT; SIGHUP reloads its secrets:
//
//	trustd --listen ADDR:50001 --secrets DIR [--joins DIR] [--cert-lifetime 24h]
func Main(args []string) error {
	opts, err := parseArgs(args)
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)

	defer signal.Stop(hup)

	opts.ReloadNow = hup

	return run(ctx, opts)
}

func parseArgs(args []string) (Options, error) {
	fs := flag.NewFlagSet("trustd", flag.ContinueOnError)

	var opts Options

	fs.StringVar(&opts.Listen, "listen", "", "address:port to serve on (the node address, port 50001)")
	fs.StringVar(&opts.Dir, "secrets", "", "trustd's folder: CA, token and serving certificate")
	fs.StringVar(&opts.Joins, "joins", "", "the join request folder (join by approval, docs/join-approval.md); without it a CSR without a token is refused")
	fs.DurationVar(&opts.Lifetime, "cert-lifetime", DefaultLifetime, "lifetime of signed certificates")
	fs.DurationVar(&opts.Reload, "reload-interval", time.Second, "how often the folder is checked for rotated files")
	fs.IntVar(&opts.Burst, "failed-burst", 5, "failed attempts a peer may make before it is slowed down")
	fs.DurationVar(&opts.Refill, "failed-refill", 10*time.Second, "a peer gets one more failed attempt per this interval")

	if err := fs.Parse(args); err != nil {
		return opts, err
	}

	if opts.Listen == "" || opts.Dir == "" {
		return opts, errors.New("--listen and --secrets are required")
	}

	return opts, nil
}

// run serves until ctx ends (then stops gracefully, cutting calls still open after 5s) or
// the server fails.
func run(ctx context.Context, opts Options) error {
	log, err := zap.NewProduction()
	if err != nil {
		return err
	}

	defer log.Sync()

	store, err := NewStore(opts.Dir)
	if err != nil {
		return fmt.Errorf("loading %s: %w", opts.Dir, err)
	}

	var joins *Joins
	if opts.Joins != "" {
		joins = &Joins{Dir: opts.Joins}
	}

	srv := NewGRPCServer(&Server{
		Certs:    store,
		Joins:    joins,
		Lifetime: opts.Lifetime,
		Limiter:  &Limiter{Burst: opts.Burst, Refill: opts.Refill},
		Log:      log,
	})

	l, err := Listen(opts.Listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", opts.Listen, err)
	}

	logReload := func(reloaded bool, err error) {
		if err != nil {
			log.Warn("reloading secrets failed, keeping the current ones", zap.Error(err))
		} else if reloaded {
			log.Info("secrets reloaded")
		}
	}

	watchCtx, stopWatch := context.WithCancel(context.Background())

	var wg sync.WaitGroup

	defer func() {
		stopWatch()
		wg.Wait()
	}()

	wg.Go(func() { store.Watch(watchCtx, opts.Reload, logReload) })
	if joins != nil {
		wg.Go(func() { pruneJoins(watchCtx, joins, log) })
	}

	served := make(chan error, 1)

	wg.Go(func() { served <- srv.Serve(l) })

	log.Info("trustd serving", zap.String("address", opts.Listen), zap.Duration("cert_lifetime", opts.Lifetime))

	for {
		select {
		case err = <-served:
			return err
		case <-opts.ReloadNow:
			logReload(store.Reload())
		case <-ctx.Done():
			log.Info("stopping")
			gracefulStop(srv.GracefulStop, srv.Stop, 5*time.Second)

			return nil
		}
	}
}

// pruneJoins drops stale pending join requests hourly (new requests prune too), so the list an
// admin sees does not keep keys that stopped asking.
func pruneJoins(ctx context.Context, joins *Joins, log *zap.Logger) {
	t := time.NewTicker(time.Hour)
	defer t.Stop()

	for {
		if err := joins.Prune(time.Now()); err != nil {
			log.Warn("pruning join requests", zap.Error(err))
		}

		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// gracefulStop lets calls in flight finish, and cuts them after grace.
func gracefulStop(graceful, hard func(), grace time.Duration) {
	stopped := make(chan struct{})

	go func() {
		graceful()
		close(stopped)
	}()

	select {
	case <-stopped:
	case <-time.After(grace):
		hard()
		<-stopped
	}
}
