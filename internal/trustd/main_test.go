package trustd

import (
	"context"
	"crypto/tls"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
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

	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		conn, err := tls.Dial("tcp", addr, cfg)
		if err == nil {
			conn.Close()

			break
		}

		if time.Now().After(deadline) {
			t.Fatalf("trustd did not serve its certificate: %v", err)
		}
	}

	hup <- syscall.SIGHUP

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
