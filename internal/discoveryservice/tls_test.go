package discoveryservice

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/discovery-api/api/v1alpha1/server/pb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/talos-go/talos/internal/pki"
)

// TestServeTLS: with a TLS config the service speaks only TLS; a client trusting the
// certificate is served, a plain one is not.
func TestServeTLS(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()

	cert, err := pki.SelfSigned(pki.Leaf{
		CommonName: "discovery", IPs: []net.IP{net.IPv4(127, 0, 0, 1)},
		ExtKeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, Lifetime: time.Hour,
	}, time.Now())
	if err != nil {
		t.Fatal(err)
	}

	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}

	svc, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}

	l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}

	serveCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)

	go func() {
		done <- svc.Serve(serveCtx, l, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	}()

	defer func() {
		stop()

		if err := <-done; err != nil {
			t.Error(err)
		}
	}()

	roots := x509.NewCertPool()
	roots.AddCert(leaf)

	for _, tc := range []struct {
		name  string
		creds credentials.TransportCredentials
		ok    bool
	}{
		{"TLS", credentials.NewTLS(&tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}), true},
		{"plain", insecure.NewCredentials(), false},
	} {
		conn, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(tc.creds))
		if err != nil {
			t.Fatal(err)
		}

		callCtx, callCancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := pb.NewClusterClient(conn).Hello(callCtx, &pb.HelloRequest{ClusterId: "c1", ClientVersion: "v1.11.0"})

		callCancel()
		conn.Close()

		switch {
		case tc.ok && (err != nil || len(resp.GetClientIp()) != 4):
			t.Errorf("%s: Hello: %v, %v", tc.name, resp, err)
		case !tc.ok && err == nil:
			t.Errorf("%s: a plain client was served by the TLS listener", tc.name)
		}
	}
}

func TestMainRefusesHalfTLS(t *testing.T) {
	err := Main([]string{"--addr", "127.0.0.1:0", "--cert", "server.crt"})
	if err == nil || !strings.Contains(err.Error(), "--cert and --key") {
		t.Errorf("Main with --cert and no --key: %v, want an error naming both flags", err)
	}
}
