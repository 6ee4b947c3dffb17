package services

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"

	secretsctrl "github.com/talos-go/talos/internal/machined/controllers/secrets"
	"github.com/talos-go/talos/internal/machined/runtime"
	"github.com/talos-go/talos/internal/machined/system"
	"github.com/talos-go/talos/internal/machined/system/runner"
	"github.com/talos-go/talos/internal/machined/userfiles"
	"github.com/talos-go/talos/internal/trustd"
)

// Trustd is the certificate endpoint for joining nodes (control planes run it). It runs as its
// own process and sees only its folder: the CA, the token and its serving certificate, which
// the secrets controllers write; and it writes only the join request folder on STATE.
func Trustd(r *runtime.Runtime) *system.Service {
	dir := r.Paths.Secrets("trustd")
	joins := filepath.Join(r.Paths.State(), trustd.JoinsDir)
	listen := net.JoinHostPort(r.Address, strconv.Itoa(trustd.Port))

	return &system.Service{
		ID:                   "trustd",
		ConditionDescription: "time sync and trustd certificates",
		Condition: func(ctx context.Context) error {
			if err := waitTimeSync(ctx, r); err != nil {
				return err
			}

			if err := waitResource(ctx, r.State, secrets.NewTrustd().Metadata()); err != nil {
				return err
			}

			return waitFiles(ctx, dir, trustd.Files)
		},
		Runner: func() (system.Runner, error) {
			out, err := r.Logs.Writer("trustd")
			if err != nil {
				return nil, err
			}

			// Join requests are kept on STATE, the one folder trustd writes.
			if err = os.MkdirAll(joins, 0o700); err != nil {
				return nil, err
			}

			args := program(r, "trustd")
			sb := confined(dir, args[0])
			sb.ReadWrite = append(sb.ReadWrite, joins)

			return &runner.Process{
				Args: append(args,
					"--listen", listen,
					"--secrets", dir,
					"--joins", joins,
					"--cert-lifetime", secretsctrl.Lifetime(r.CertLifetime).String(),
				),
				Output:          out,
				GracefulTimeout: 5 * time.Second,
				Sandbox:         sb,
				// GOMEMLIMIT first: machine.env may set its own.
				Env:         append([]string{goMemLimit(trustdCgroup)}, userfiles.Env(r.Config())...),
				OOMScoreAdj: oomScoreTrustd,
				Cgroup:      cgroupOf(r, trustdCgroup),
				Log:         r.Log,
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
