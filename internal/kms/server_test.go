package kms_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	kmsapi "github.com/siderolabs/kms-client/api/kms"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/talos-go/talos/internal/encryption"
	"github.com/talos-go/talos/internal/kms"
)

// serve runs a KMS with the key in dir on a loopback port and returns its grpc:// endpoint.
func serve(t *testing.T, dir string) string {
	t.Helper()

	key, err := kms.LoadOrCreateKey(filepath.Join(dir, "kms.key"))
	if err != nil {
		t.Fatal(err)
	}

	srv, err := kms.NewServer(key)
	if err != nil {
		t.Fatal(err)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}

	g := grpc.NewServer()
	kmsapi.RegisterKMSServiceServer(g, srv)

	go g.Serve(l)

	t.Cleanup(g.Stop)

	return "grpc://" + l.Addr().String()
}

func TestSealUnsealOverGRPC(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	c, err := encryption.DialKMS(serve(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	const node = "5f1c0a2e-8d3b-4c6f-9e7a-1b2c3d4e5f60"

	secret := []byte("the volume's passphrase")

	sealed, err := c.Seal(ctx, node, secret)
	if err != nil {
		t.Fatal(err)
	}

	if string(sealed) == string(secret) || len(sealed) <= len(secret) {
		t.Fatalf("sealed data is not sealed: %q", sealed)
	}

	got, err := c.Unseal(ctx, node, sealed)
	if err != nil || string(got) != string(secret) {
		t.Fatalf("unseal = %q, %v", got, err)
	}

	// Another node cannot unseal it.
	if _, err = c.Unseal(ctx, "0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9", sealed); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("another node's unseal: %v, want PermissionDenied", err)
	}

	// The key is kept (0600): a KMS restarted on it unseals what the first sealed.
	fi, err := os.Stat(filepath.Join(dir, "kms.key"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("kms.key: %v %v", fi, err)
	}

	c2, err := encryption.DialKMS(serve(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()

	if got, err = c2.Unseal(ctx, node, sealed); err != nil || string(got) != string(secret) {
		t.Fatalf("unseal after a restart = %q, %v", got, err)
	}

	// A KMS with another key cannot.
	c3, err := encryption.DialKMS(serve(t, t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()

	if _, err = c3.Unseal(ctx, node, sealed); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("another KMS's unseal: %v, want PermissionDenied", err)
	}

	if _, err = c.Seal(ctx, "", secret); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("seal without a node UUID: %v, want InvalidArgument", err)
	}
}

func TestDamagedKeyIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kms.key")
	if err := os.WriteFile(path, []byte("short"), 0o600); err != nil {
		t.Fatal(err)
	}

	if _, err := kms.LoadOrCreateKey(path); err == nil {
		t.Fatal("a 5-byte key was accepted")
	}
}
