package services

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	secretsctrl "github.com/talos-go/talos/internal/machined/controllers/secrets"
	"github.com/talos-go/talos/internal/machined/runtime"
	"github.com/talos-go/talos/internal/machined/system"
	"github.com/talos-go/talos/internal/machined/system/runner"
	"github.com/talos-go/talos/internal/trustd"
)

func init() { register(Trustd) }

// Trustd is the certificate endpoint for joining nodes, on control planes only. It runs as its
// own process and sees only its folder: the CA, the token and its serving certificate, which
// the secrets controllers write.
func Trustd(r *runtime.Runtime) *system.Service {
	dir := r.Paths.Secrets("trustd")
	listen := net.JoinHostPort(r.Address, strconv.Itoa(trustd.Port))

	return &system.Service{
		ID:                   "trustd",
		ConditionDescription: "trustd certificates",
		Condition: func(ctx context.Context) error {
			cfg := r.Config()
			if cfg == nil || cfg.Machine() == nil || !cfg.Machine().Type().IsControlPlane() {
				return errors.New("trustd runs on control planes only")
			}

			return waitFiles(ctx, dir, trustd.Files)
		},
		Runner: func() (system.Runner, error) {
			out, err := r.Logs.Writer("trustd")
			if err != nil {
				return nil, err
			}

			return &runner.Process{
				Args: []string{
					r.Binary, "trustd",
					"--listen", listen,
					"--secrets", dir,
					"--cert-lifetime", secretsctrl.Lifetime().String(),
				},
				Output:          out,
				GracefulTimeout: 5 * time.Second,
				Sandbox:         confined(r, dir),
			}, nil
		},
		HealthFunc: func(ctx context.Context) error { return trustdHealth(ctx, dir, listen) },
		HealthSettings: system.HealthSettings{
			InitialDelay: 100 * time.Millisecond,
			Period:       5 * time.Second,
			Timeout:      2 * time.Second,
		},
	}
}

// waitFiles blocks until every file exists in dir.
func waitFiles(ctx context.Context, dir string, names []string) error {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()

	for {
		missing := false

		for _, name := range names {
			if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
				missing = true

				break
			}
		}

		if !missing {
			return nil
		}

		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// trustdHealth completes a TLS handshake with trustd, verifying its certificate against the CA.
func trustdHealth(ctx context.Context, dir, addr string) error {
	caPEM, err := os.ReadFile(filepath.Join(dir, trustd.CACrt))
	if err != nil {
		return fmt.Errorf("reading trustd CA: %w", err)
	}

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)

	host, _, _ := net.SplitHostPort(addr)

	d := tls.Dialer{Config: &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pool, ServerName: host, NextProtos: []string{"h2"}}}

	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("trustd handshake: %w", err)
	}

	return conn.Close()
}
