package trustd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// Port is trustd's port.
const Port = 50001

// Main runs trustd as its own process:
//
//	trustd --listen ADDR:50001 --secrets DIR [--cert-lifetime 24h]
func Main(args []string) error {
	fs := flag.NewFlagSet("trustd", flag.ContinueOnError)

	var (
		listen, dir      string
		lifetime, reload time.Duration
		burst            int
		refill           time.Duration
	)

	fs.StringVar(&listen, "listen", "", "address:port to serve on (the node address, port 50001)")
	fs.StringVar(&dir, "secrets", "", "trustd's folder: CA, token and serving certificate")
	fs.DurationVar(&lifetime, "cert-lifetime", DefaultLifetime, "lifetime of signed certificates")
	fs.DurationVar(&reload, "reload-interval", time.Second, "how often the folder is checked for rotated files")
	fs.IntVar(&burst, "failed-burst", 5, "failed attempts a peer may make before it is slowed down")
	fs.DurationVar(&refill, "failed-refill", 10*time.Second, "a peer gets one more failed attempt per this interval")

	if err := fs.Parse(args); err != nil {
		return err
	}

	if listen == "" || dir == "" {
		return errors.New("--listen and --secrets are required")
	}

	log, err := zap.NewProduction()
	if err != nil {
		return err
	}

	defer log.Sync()

	store, err := NewStore(dir)
	if err != nil {
		return fmt.Errorf("loading %s: %w", dir, err)
	}

	srv := NewGRPCServer(&Server{
		Certs:    store,
		Lifetime: lifetime,
		Limiter:  &Limiter{Burst: burst, Refill: refill},
		Log:      log,
	})

	l, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", listen, err)
	}

	logReload := func(reloaded bool, err error) {
		if err != nil {
			log.Warn("reloading secrets failed, keeping the current ones", zap.Error(err))
		} else if reloaded {
			log.Info("secrets reloaded")
		}
	}

	watchCtx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()

	var wg sync.WaitGroup

	wg.Add(2)

	go func() {
		defer wg.Done()

		store.Watch(watchCtx, reload, logReload)
	}()

	served := make(chan error, 1)

	go func() {
		defer wg.Done()

		served <- srv.Serve(l)
	}()

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)

	defer signal.Stop(sigs)

	log.Info("trustd serving", zap.String("address", listen), zap.Duration("cert_lifetime", lifetime))

	for {
		select {
		case err = <-served:
			stopWatch()
			wg.Wait()

			return err
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				logReload(store.Reload())

				continue
			}

			log.Info("stopping", zap.Stringer("signal", sig))

			stopped := make(chan struct{})

			go func() {
				srv.GracefulStop()
				close(stopped)
			}()

			select {
			case <-stopped:
			case <-time.After(5 * time.Second):
				srv.Stop()
				<-stopped
			}

			stopWatch()
			wg.Wait()

			return nil
		}
	}
}
