package load

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"net"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
)

const apidAddr = nodeAddr + ":50000"

// stallStreams opens n `logs -f` streams of machined's whole log on one connection and never
// reads them: flow control must hold apid's share of them to a window each. The returned
// function closes them.
func stallStreams(t *testing.T, ctx context.Context, cl *client.Client, n int) func() {
	t.Helper()

	sctx, cancel := context.WithCancel(ctx)

	for range n {
		if _, err := cl.MachineClient.Logs(sctx, &machine.LogsRequest{Namespace: "system", Id: "machined", Follow: true, TailLines: -1}); err != nil {
			t.Fatalf("opening a stream that is never read: %v", err)
		}
	}

	return func() {
		cancel()
		cl.Close()
	}
}

// silentConns opens n TCP connections to apid that never send a byte (not even a TLS hello).
func silentConns(t *testing.T, n int) []net.Conn {
	t.Helper()

	var conns []net.Conn

	for range n {
		c, err := net.Dial("tcp", apidAddr)
		if err != nil {
			t.Fatal(err)
		}

		t.Cleanup(func() { c.Close() })

		conns = append(conns, c)
	}

	return conns
}

// silentTLSConns opens n connections that complete the TLS handshake with a valid client
// certificate and then send nothing: no HTTP/2 preface.
func silentTLSConns(t *testing.T, cfg *clientconfig.Config, n int) []net.Conn {
	t.Helper()

	ctx := cfg.Contexts[cfg.Context]

	crt, _ := base64.StdEncoding.DecodeString(ctx.Crt)
	key, _ := base64.StdEncoding.DecodeString(ctx.Key)
	ca, _ := base64.StdEncoding.DecodeString(ctx.CA)

	cert, err := tls.X509KeyPair(crt, key)
	if err != nil {
		t.Fatal(err)
	}

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)

	var conns []net.Conn

	for range n {
		c, err := tls.Dial("tcp", apidAddr, &tls.Config{
			Certificates: []tls.Certificate{cert}, RootCAs: pool, ServerName: nodeAddr, NextProtos: []string{"h2"},
		})
		if err != nil {
			t.Fatal(err)
		}

		t.Cleanup(func() { c.Close() })

		conns = append(conns, c)
	}

	return conns
}
