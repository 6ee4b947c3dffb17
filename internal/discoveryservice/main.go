package discoveryservice

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// Main runs the discovery service until SIGINT or SIGTERM (`talos-go discovery-service`).
func Main(args []string) error {
	fs := flag.NewFlagSet("discovery-service", flag.ContinueOnError)
	addr := fs.String("addr", ":3000", "address to serve the discovery API on")
	fd := fs.Int("listener-fd", 0, "serve the listening socket inherited as this file descriptor instead of binding --addr (talosctl cluster create binds the port itself, so a port in use is refused before anything starts)")
	snapshot := fs.String("snapshot", "", "file to keep the state in across restarts (none: memory only)")
	interval := fs.Duration("snapshot-interval", DefaultSnapshotInterval, "how often to write the snapshot (also written on exit)")
	certFile := fs.String("cert", "", "TLS certificate (PEM); with --key. Neither: plain gRPC")
	keyFile := fs.String("key", "", "its key (PEM)")
	metricsAddr := fs.String("metrics-addr", "", "address to serve Prometheus metrics on at /metrics (none: off)")

	if err := fs.Parse(args); err != nil {
		return err
	}

	var tlsConfig *tls.Config

	switch {
	case (*certFile == "") != (*keyFile == ""):
		return errors.New("--cert and --key go together: give both for TLS, or neither for plain gRPC")
	case *certFile != "":
		cert, err := tls.LoadX509KeyPair(*certFile, *keyFile)
		if err != nil {
			return fmt.Errorf("--cert %s, --key %s: %w", *certFile, *keyFile, err)
		}

		tlsConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}

	logger, err := zap.NewProduction()
	if err != nil {
		return err
	}

	defer logger.Sync()

	svc, err := New(Options{SnapshotPath: *snapshot, SnapshotInterval: *interval, Logger: logger})
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	l, err := listen(ctx, *addr, *fd)
	if err != nil {
		return err
	}

	if *metricsAddr != "" {
		ml, err := (&net.ListenConfig{}).Listen(ctx, "tcp", *metricsAddr)
		if err != nil {
			return fmt.Errorf("--metrics-addr %s: %w", *metricsAddr, err)
		}

		mux := http.NewServeMux()
		mux.Handle("/metrics", svc.Metrics())

		ms := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}

		go ms.Serve(ml) //nolint:errcheck // ends with ms.Close below; a metrics failure must not stop discovery

		defer ms.Close()
	}

	logger.Info("discovery service serving", zap.Stringer("addr", l.Addr()), zap.Bool("tls", tlsConfig != nil),
		zap.String("snapshot", *snapshot))

	err = svc.Serve(ctx, l, tlsConfig)
	logger.Info("discovery service stopped", zap.Error(err))

	return err
}

// listen binds addr, or takes the listener inherited as fd when fd is set.
func listen(ctx context.Context, addr string, fd int) (net.Listener, error) {
	if fd == 0 {
		l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("--addr %s: %w", addr, err)
		}

		return l, nil
	}

	f := os.NewFile(uintptr(fd), "discovery listener")
	defer f.Close() // FileListener dups it

	l, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("--listener-fd %d: %w", fd, err)
	}

	return l, nil
}
