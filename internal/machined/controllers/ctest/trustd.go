package ctest

import (
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/talos-go/talos/internal/trustd"
)

// ServeTrustd runs the real trustd server (certificate signing) on
// host:50001 from the folder the trustd files controller wrote, until the test ends.
func ServeTrustd(t *testing.T, dir, host string) {
	t.Helper()

	store, err := trustd.NewStore(dir)
	require.NoError(t, err)

	l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(constants.TrustdPort)))
	require.NoError(t, err)

	srv := trustd.NewGRPCServer(&trustd.Server{
		Certs:   store,
		Limiter: &trustd.Limiter{Burst: 5, Refill: 10 * time.Second},
		Log:     zaptest.NewLogger(t),
	})

	done := make(chan error, 1)

	go func() { done <- srv.Serve(l) }()

	t.Cleanup(func() {
		srv.Stop()
		require.NoError(t, <-done)
	})
}
