package trustd

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/pem"
	"errors"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/talos-go/talos/internal/testenv"
)

func TestParseArgs(t *testing.T) {
	if _, err := parseArgs([]string{"--listen", "127.0.0.1:50001"}); err == nil || !strings.Contains(err.Error(), "--secrets") {
		t.Fatalf("missing --secrets: %v", err)
	}

	opts, err := parseArgs([]string{"--listen", "a:1", "--secrets", "d", "--cert-lifetime", "2h"})
	if err != nil || opts.Listen != "a:1" || opts.Dir != "d" || opts.Lifetime != 2*time.Hour || opts.Burst != 5 {
		t.Fatalf("%+v, %v", opts, err)
	}
}

// run serves TLS from its folder, reloads on request and stops cleanly with its context.
func TestRun(t *testing.T) {
	ca := newTestCA(t)
	dir := t.TempDir()
	crt, key := ca.serverPair(t, "127.0.0.1")

	if err := WriteFiles(dir, map[string][]byte{
		CACrt: ca.crtPEM, CAKey: ca.keyPEM, TokenFile: []byte(testToken), ServerCrt: crt, ServerKey: key,
	}); err != nil {
		t.Fatal(err)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}

	addr := l.Addr().String()
	l.Close()

	ctx, cancel := context.WithCancel(context.Background())
	hup := make(chan os.Signal, 1)
	done := make(chan error, 1)

	go func() {
		done <- run(ctx, Options{Listen: addr, Dir: dir, Lifetime: time.Hour, Reload: time.Hour, Burst: 5, Refill: time.Second, ReloadNow: hup})
	}()

	cfg := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: ca.pool(), ServerName: "127.0.0.1", NextProtos: []string{"h2"}}

	// served is the serving certificate trustd presents now.
	served := func() ([]byte, error) {
		conn, err := tls.Dial("tcp", addr, cfg)
		if err != nil {
			return nil, err
		}
		defer conn.Close()

		return conn.ConnectionState().PeerCertificates[0].Raw, nil
	}

	testenv.WaitFor(t, "trustd serving its certificate", 10*time.Second, func() error {
		got, err := served()
		if err == nil && !bytes.Equal(got, pemDER(t, crt)) {
			return errors.New("served a certificate that is not the folder's")
		}

		return err
	})

	// A rotated certificate is served once SIGHUP asks for it (the periodic check is an hour
	// away): until then the old one is.
	crt2, key2 := ca.serverPair(t, "127.0.0.1")
	if err := WriteFiles(dir, map[string][]byte{
		CACrt: ca.crtPEM, CAKey: ca.keyPEM, TokenFile: []byte(testToken), ServerCrt: crt2, ServerKey: key2,
	}); err != nil {
		t.Fatal(err)
	}

	if got, err := served(); err != nil || !bytes.Equal(got, pemDER(t, crt)) {
		t.Fatalf("before SIGHUP the first certificate is served: %v", err)
	}

	hup <- syscall.SIGHUP

	testenv.WaitFor(t, "the rotated certificate served after SIGHUP", 10*time.Second, func() error {
		got, err := served()
		if err == nil && !bytes.Equal(got, pemDER(t, crt2)) {
			return errors.New("still the first certificate")
		}

		return err
	})

	cancel()

	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not stop with its context")
	}
}

// pemDER is the DER bytes of a PEM certificate.
func pemDER(t *testing.T, crtPEM []byte) []byte {
	t.Helper()

	b, _ := pem.Decode(crtPEM)
	if b == nil {
		t.Fatal("not a PEM certificate")
	}

	return b.Bytes
}
