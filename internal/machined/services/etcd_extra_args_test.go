package services

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	configres "github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/talos-go/talos/internal/etcd"
	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	"github.com/talos-go/talos/internal/machined/resources"
	"github.com/talos-go/talos/internal/machined/runtime"
	"github.com/talos-go/talos/internal/machined/system/logging"
	"github.com/talos-go/talos/internal/testenv"
)

// TestEtcdExtraArgsFromConfig: cluster.etcd.extraArgs reach etcd's options and its command line,
// and the real etcd started from them obeys: with max-request-bytes=2048 a 4 KiB value is
// refused as too large, while a small one is stored (etcd's default limit is 1.5 MiB).
func TestEtcdExtraArgsFromConfig(t *testing.T) {
	bin := testenv.EtcdBinary(t) // skips under -short

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	st, err := resources.NewState(ctx)
	require.NoError(t, err)

	typ := configres.NewMachineType()
	typ.SetMachineType(machine.TypeInit) // bootstraps itself, without the Bootstrap API
	require.NoError(t, st.Create(ctx, typ))

	root := t.TempDir()

	logs, err := logging.NewManager(filepath.Join(root, "logs"))
	require.NoError(t, err)

	r := &runtime.Runtime{
		Mode:    runtime.Mode{Kind: runtime.Process},
		Address: fmt.Sprintf("127.86.%d.1", os.Getpid()%250+1),
		Paths:   runtime.Paths{Root: root},
		Binary:  filepath.Join(filepath.Dir(bin), "machined"), // etcd is looked for next to machined
		State:   st,
		Logs:    logs,
		Log:     zaptest.NewLogger(t),
	}
	r.SetConfig(ctest.MachineConfig(t, machine.TypeInit, func(c *v1alpha1.Config) {
		c.ClusterConfig.EtcdConfig.EtcdExtraArgs = map[string]string{"max-request-bytes": "2048"}
	}).Provider())

	o, err := EtcdOptions(r)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"max-request-bytes": "2048"}, o.ExtraArgs)

	args, err := etcd.Args(etcd.ArgsInput{Binary: o.Binary, Name: o.Name, Address: o.Address, DataDir: o.DataDir, ExtraArgs: o.ExtraArgs})
	require.NoError(t, err)
	assert.Contains(t, args, "--max-request-bytes=2048")

	m := NewEtcdManager(r)
	r.Etcd = m

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})

	go func() {
		defer close(done)

		for runCtx.Err() == nil { // as the supervisor: restart until stopped
			_ = m.Run(runCtx)

			select {
			case <-runCtx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()

	t.Cleanup(func() { stop(); <-done })

	testenv.WaitFor(t, "etcd healthy", time.Minute, func() error { return m.Health(ctx) })

	cli, err := m.LocalClient()
	require.NoError(t, err)

	defer cli.Close()

	_, err = cli.Put(ctx, "small", "value")
	require.NoError(t, err)

	_, err = cli.Put(ctx, "large", strings.Repeat("x", 4096))
	require.Error(t, err, "a 4 KiB request passes max-request-bytes=2048")
	assert.Contains(t, err.Error(), "request is too large")
}
