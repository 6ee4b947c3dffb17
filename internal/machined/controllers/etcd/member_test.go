package etcd_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	cosiruntime "github.com/cosi-project/runtime/pkg/controller/runtime"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	cx509 "github.com/siderolabs/crypto/x509"
	etcdres "github.com/siderolabs/talos/pkg/machinery/resources/etcd"
	"go.uber.org/zap/zaptest"

	"github.com/talos-go/talos/internal/etcd"
	etcdctrl "github.com/talos-go/talos/internal/machined/controllers/etcd"
	"github.com/talos-go/talos/internal/machined/resources"
	"github.com/talos-go/talos/internal/testenv"
)

// TestMemberController: the local Member resource carries the running member's ID and goes
// away once etcd stops.
func TestMemberController(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd")
	}

	ca, err := cx509.NewSelfSignedCertificateAuthority(cx509.ECDSA(true))
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	opts := etcd.Options{
		Binary:     testenv.EtcdBinary(t),
		Name:       "cp",
		Address:    testenv.Loopback(81) + "1",
		DataDir:    filepath.Join(dir, "EPHEMERAL", "lib", "etcd"),
		SecretsDir: filepath.Join(dir, "secrets", "etcd"),
		CACert:     ca.CrtPEM,
		CAKey:      ca.KeyPEM,
	}
	m := etcd.NewManager(func() (etcd.Options, error) { return opts, nil })

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	etcdCtx, stopEtcd := context.WithCancel(ctx)
	etcdDone := make(chan error, 1)

	go func() { etcdDone <- m.Run(etcdCtx) }()

	defer func() {
		stopEtcd()
		<-etcdDone
	}()

	if err := m.Bootstrap(ctx, etcd.BootstrapOptions{}); err != nil {
		t.Fatal(err)
	}

	st, err := resources.NewState(ctx)
	if err != nil {
		t.Fatal(err)
	}

	rt, err := cosiruntime.NewRuntime(st, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}

	if err := rt.RegisterController(&etcdctrl.MemberController{Etcd: m, Interval: 200 * time.Millisecond, Misses: 2}); err != nil {
		t.Fatal(err)
	}

	rtCtx, stopRt := context.WithCancel(ctx)
	rtDone := make(chan error, 1)

	go func() { rtDone <- rt.Run(rtCtx) }()

	defer func() {
		stopRt()

		if err := <-rtDone; err != nil {
			t.Error(err)
		}
	}()

	var want string

	for want == "" {
		if status, err := m.Status(ctx); err == nil {
			want = etcdctrl.FormatMemberID(status.Header.MemberId)
		} else if ctx.Err() != nil {
			t.Fatal(err)
		} else {
			time.Sleep(100 * time.Millisecond)
		}
	}

	waitMember := func(present bool) {
		t.Helper()

		for {
			res, err := safe.StateGetByID[*etcdres.Member](ctx, st, etcdres.LocalMemberID)

			switch {
			case present && err == nil && res.TypedSpec().MemberID == want:
				return
			case !present && state.IsNotFoundError(err):
				return
			case ctx.Err() != nil:
				t.Fatalf("waiting for member present=%v: %v %v", present, res, err)
			}

			time.Sleep(50 * time.Millisecond)
		}
	}

	waitMember(true)

	stopEtcd()
	<-etcdDone
	etcdDone <- nil // for the deferred wait

	waitMember(false)
}
