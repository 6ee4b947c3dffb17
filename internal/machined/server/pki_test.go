package server_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	mtype "github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/talos-go/talos/internal/machined/runtime"
	"github.com/talos-go/talos/internal/machined/server"
)

func TestGenerateClientConfiguration(t *testing.T) {
	in, err := generate.NewInput("pki", "https://10.5.0.1:6443", constants.DefaultKubernetesVersion)
	if err != nil {
		t.Fatal(err)
	}

	machineFor := func(typ mtype.Type) *server.Machine {
		cfg, err := in.Config(typ)
		if err != nil {
			t.Fatal(err)
		}

		r := &runtime.Runtime{Address: "10.5.0.2"}
		r.SetConfig(cfg)

		return &server.Machine{R: r}
	}

	cp, worker := machineFor(mtype.TypeControlPlane), machineFor(mtype.TypeWorker)
	ctx := context.Background()

	for _, tc := range []struct {
		name string
		m    *server.Machine
		req  *machine.GenerateClientConfigurationRequest
		code codes.Code
	}{
		{"worker has no CA key", worker, &machine.GenerateClientConfigurationRequest{Roles: []string{"os:admin"}}, codes.FailedPrecondition},
		{"unknown role", cp, &machine.GenerateClientConfigurationRequest{Roles: []string{"os:root"}}, codes.InvalidArgument},
		{"no role", cp, &machine.GenerateClientConfigurationRequest{}, codes.InvalidArgument},
		{"negative ttl", cp, &machine.GenerateClientConfigurationRequest{Roles: []string{"os:reader"}, CrtTtl: durationpb.New(-time.Hour)}, codes.InvalidArgument},
	} {
		if _, err := tc.m.GenerateClientConfiguration(ctx, tc.req); status.Code(err) != tc.code {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.code)
		}
	}

	resp, err := cp.GenerateClientConfiguration(ctx, &machine.GenerateClientConfigurationRequest{
		Roles: []string{"os:reader", "os:etcd:backup"}, CrtTtl: durationpb.New(2 * time.Hour),
	})
	if err != nil {
		t.Fatal(err)
	}

	msg := resp.GetMessages()[0]

	pair, err := tls.X509KeyPair(msg.GetCrt(), msg.GetKey())
	if err != nil {
		t.Fatal(err)
	}

	crt, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(msg.GetCa())

	if _, err = crt.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatal(err)
	}

	if got := crt.Subject.Organization; len(got) != 2 {
		t.Errorf("organizations %v, want the two roles", got)
	}

	if d := crt.NotAfter.Sub(crt.NotBefore); d > 2*time.Hour+2*time.Minute || d < 2*time.Hour {
		t.Errorf("lifetime %v, want 2h", d)
	}

	cfg, err := clientconfig.FromBytes(msg.GetTalosconfig())
	if err != nil {
		t.Fatal(err)
	}

	ctxCfg := cfg.Contexts[cfg.Context]
	if cfg.Context != "pki" || ctxCfg == nil || len(ctxCfg.Endpoints) != 1 || ctxCfg.Endpoints[0] != "10.5.0.2" {
		t.Errorf("talosconfig context %q: %+v", cfg.Context, ctxCfg)
	}
}
