package etcd_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	cx509 "github.com/siderolabs/crypto/x509"
	etcdres "github.com/siderolabs/talos/pkg/machinery/resources/etcd"
	"github.com/stretchr/testify/assert"

	"github.com/talos-go/talos/internal/etcd"
	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	etcdctrl "github.com/talos-go/talos/internal/machined/controllers/etcd"
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

	env := ctest.Start(t, &etcdctrl.MemberController{Etcd: m, Interval: 200 * time.Millisecond, Misses: 2})

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

	// While etcd answers: the local member with its ID.
	ctest.AssertResource(env, etcdres.LocalMemberID, func(r *etcdres.Member, a *assert.Assertions) {
		a.Equal(want, r.TypedSpec().MemberID)
	})

	// etcd stops: after two missed polls the resource goes.
	stopEtcd()
	<-etcdDone
	etcdDone <- nil // for the deferred wait

	ctest.AssertNoResource[*etcdres.Member](env, etcdres.LocalMemberID)
}
