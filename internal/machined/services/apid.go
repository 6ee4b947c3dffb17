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

	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"

	"github.com/talos-go/talos/internal/apid/certs"
	"github.com/talos-go/talos/internal/machined/runtime"
	"github.com/talos-go/talos/internal/machined/system"
	"github.com/talos-go/talos/internal/machined/system/runner"
	"github.com/talos-go/talos/internal/machined/userfiles"
)

// APID is the node's API gateway: its own process on the node address, port 50000, serving
// mutual TLS with the certificates in its folder (written by the secrets controllers) and
// reaching machined only through the socket. Rotated certificates are picked up by apid
// itself, without a restart. A node with its own network (container, metal) listens on every
// address, as upstream's: a VIP it holds reaches it too; a process node, on its own address.
func APID(r *runtime.Runtime) *system.Service {
	dir := r.Paths.Secrets("apid")
	addr := net.JoinHostPort(r.Address, strconv.Itoa(constants.ApidPort))

	listen := addr
	if !r.Mode.SharesHost() {
		listen = net.JoinHostPort("", strconv.Itoa(constants.ApidPort))
	}

	return &system.Service{
		ID:                   "apid",
		ConditionDescription: "time sync and apid certificates",
		Condition: func(ctx context.Context) error {
			if err := waitTimeSync(ctx, r); err != nil {
				return err
			}

			if err := waitResource(ctx, r.State, secrets.NewAPI().Metadata()); err != nil {
				return err
			}

			return waitFiles(ctx, dir, certs.Required)
		},
		Runner: func() (system.Runner, error) {
			out, err := r.Logs.Writer("apid")
			if err != nil {
				return nil, err
			}

			args := program(r, "apid")

			return &runner.Process{
				Args: append(args,
					"--listen", listen,
					"--certs", dir,
					"--socket", r.Paths.MachinedSocket(),
					"--local-address", r.Address,
				),
				Output:          out,
				GracefulTimeout: 10 * time.Second,
				Sandbox:         confined(dir, args[0]),
				// apid sits on every call's path, and on a VM each thread wake-up costs about
				// 20 µs of CPU. The Go runtime's monitor thread wakes every 20 µs while apid is
				// busy and is woken from deep sleep at the start of every call: 1 ms of timer
				// slack and a schedtrace period of a day (which keeps it out of deep sleep and
				// prints one scheduler line a day to apid's log) cut apid's context switches
				// per call from 8.4 to 4.0 and its CPU from 250 to 170 µs
				// (BenchmarkVersionRealMachined in internal/apid/e2e).
				TimerSlack: time.Millisecond,
				// GOMEMLIMIT first: machine.env may set its own.
				Env:         append([]string{goMemLimit(apidCgroup)}, append(userfiles.Env(r.Config()), "GODEBUG=schedtrace=86400000")...),
				OOMScoreAdj: oomScoreAPID,
				Cgroup:      cgroupOf(r, apidCgroup),
				Log:         r.Log,
			}, nil
		},
		HealthFunc: func(ctx context.Context) error {
			return apidHealth(ctx, dir, addr)
		},
		HealthSettings: system.HealthSettings{InitialDelay: 100 * time.Millisecond, Period: 5 * time.Second, Timeout: 2 * time.Second},
		Restart:        system.RestartAlways,
	}
}

// apidHealth completes a TLS handshake with apid, verifying its certificate against the CA
// bundle (in TLS 1.3 the client's handshake completes before the server checks the client
// certificate, so no client certificate is needed here).
func apidHealth(ctx context.Context, dir, addr string) error {
	caPEM, err := os.ReadFile(filepath.Join(dir, certs.CA))
	if err != nil {
		return fmt.Errorf("reading apid CA: %w", err)
	}

	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return errors.New("apid CA bundle holds no certificate")
	}

	host, _, _ := net.SplitHostPort(addr)

	d := tls.Dialer{Config: &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pool, ServerName: host, NextProtos: []string{"h2"}}}

	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("apid handshake: %w", err)
	}

	return conn.Close()
}
