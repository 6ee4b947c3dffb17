package unixsock_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/talos-go/talos/internal/unixsock"
)

func TestLongPath(t *testing.T) {
	for _, dir := range []string{
		t.TempDir(), // short enough for a plain address
		filepath.Join(t.TempDir(), strings.Repeat("a-long-folder-name/", 8)),
	} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}

		path := filepath.Join(dir, "machined.sock")

		l, err := unixsock.Listen(path)
		if err != nil {
			t.Fatalf("listen on a %d-byte path: %v", len(path), err)
		}

		go func() {
			c, err := l.Accept()
			if err != nil {
				return
			}

			c.Write([]byte("hello"))
			c.Close()
		}()

		if _, err = os.Stat(path); err != nil {
			t.Fatalf("the socket is not at its real path: %v", err)
		}

		c, err := unixsock.GRPCDialer(context.Background(), "unix://"+path)
		if err != nil {
			t.Fatalf("dial a %d-byte path: %v", len(path), err)
		}

		if got, _ := io.ReadAll(c); string(got) != "hello" {
			t.Fatalf("read %q", got)
		}

		c.Close()

		if err = l.Close(); err != nil {
			t.Fatal(err)
		}

		if _, err = os.Stat(path); !os.IsNotExist(err) {
			t.Fatalf("socket file left after Close: %v", err)
		}
	}
}
