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
)

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

// Main runs apid as its own process:
//
//	apid --listen ADDR:50000 --certs DIR --socket MACHINED_SOCKET --local-address ADDR...
func Main(args []string) error {
	fs := flag.NewFlagSet("apid", flag.ContinueOnError)

	var (
		listen, certDir, socket string
		local                   listFlag
		reload, dialTimeout     time.Duration
		remotePort              int
	)

	fs.StringVar(&listen, "listen", "", "address:port to serve on (the node address, port 50000)")
	fs.StringVar(&certDir, "certs", "", "apid's certificate folder")
	fs.StringVar(&socket, "socket", "", "machined's API socket")
	fs.Var(&local, "local-address", "address or name meaning this node (repeatable, comma-separated)")
	fs.DurationVar(&reload, "reload-interval", time.Second, "how often the certificate folder is checked for rotated files")
	fs.DurationVar(&dialTimeout, "dial-timeout", 5*time.Second, "timeout of one connection attempt to another node")
	fs.IntVar(&remotePort, "remote-port", 50000, "other nodes' apid port")

	if err := fs.Parse(args); err != nil {
		return err
	}

	if listen == "" || certDir == "" || socket == "" {
		return errors.New("--listen, --certs and --socket are required")
	}

	log, err := zap.NewProduction()
	if err != nil {
		return err
	}

	defer log.Sync()

	store, err := certs.NewStore(certDir)
	if err != nil {
		return fmt.Errorf("loading certificates: %w", err)
	}

	if host, _, err := net.SplitHostPort(listen); err == nil && host != "" {
		local = append(local, host)
	}

	srv, err := New(Options{
		Certs:          store,
		MachinedSocket: socket,
		LocalAddresses: local,
		RemotePort:     remotePort,
		DialTimeout:    dialTimeout,
		Log:            log,
	})
	if err != nil {
		return err
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// The maintenance API may still be handing the port over.
	l, err := listenRetry(ctx, listen)
	if err != nil {
		return err
	}

	var wg sync.WaitGroup

	logReload := func(reloaded bool, err error) {
		if err != nil {
			log.Warn("certificate reload failed, keeping the current certificates", zap.Error(err))
		} else if reloaded {
			log.Info("certificates reloaded")
		}
	}

	wg.Add(1)

	go func() {
		defer wg.Done()

		store.Watch(ctx, reload, logReload)
	}()

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)

	defer signal.Stop(sigs)

	served := make(chan error, 1)

	wg.Add(1)

	go func() {
		defer wg.Done()

		served <- srv.Serve(l)
	}()

	log.Info("apid serving", zap.String("address", listen), zap.Strings("local", local))

	for {
		select {
		case err = <-served:
			cancel()
			wg.Wait()

			return err
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				logReload(store.Reload())

				continue
			}

			log.Info("stopping", zap.Stringer("signal", sig))
			srv.Stop(5 * time.Second)
			cancel()
			wg.Wait()

			return nil
		}
	}
}
