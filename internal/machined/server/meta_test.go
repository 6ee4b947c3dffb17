package server_test

import (
	"context"
	"encoding/base64"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/talos-go/talos/internal/machined/resources"
	"github.com/talos-go/talos/internal/machined/runtime"
	"github.com/talos-go/talos/internal/machined/server"
	"github.com/talos-go/talos/internal/meta"
)

func TestMetaWriteDelete(t *testing.T) {
	ctx := context.Background()

	st, err := resources.NewState(ctx)
	if err != nil {
		t.Fatal(err)
	}

	r := &runtime.Runtime{Paths: runtime.Paths{Root: t.TempDir()}, State: st}
	m := &server.Machine{R: r}

	// Bytes with a newline survive the line-based store.
	value := []byte("line one\nline two=2")
	if _, err = m.MetaWrite(ctx, &machine.MetaWriteRequest{Key: 0x0c, Value: value}); err != nil {
		t.Fatal(err)
	}

	store, err := meta.Open(r.Paths.Meta())
	if err != nil {
		t.Fatal(err)
	}

	got, err := store.Get("talos.0x0c")
	if err != nil {
		t.Fatal(err)
	}

	if decoded, _ := base64.StdEncoding.DecodeString(got); string(decoded) != string(value) {
		t.Fatalf("stored %q, want %q", decoded, value)
	}

	// The machine's own keys are untouched.
	if err = store.Set(meta.ActiveSlot, "B"); err != nil {
		t.Fatal(err)
	}

	if _, err = m.MetaDelete(ctx, &machine.MetaDeleteRequest{Key: 0x0c}); err != nil {
		t.Fatal(err)
	}

	if _, err = m.MetaDelete(ctx, &machine.MetaDeleteRequest{Key: 0x0c}); status.Code(err) != codes.NotFound {
		t.Errorf("deleting a missing key: %v, want NotFound", err)
	}

	if _, err = m.MetaWrite(ctx, &machine.MetaWriteRequest{Key: 0x100}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("key 0x100: %v, want InvalidArgument", err)
	}

	values, err := store.Read()
	if err != nil {
		t.Fatal(err)
	}

	if len(values) != 1 || values[meta.ActiveSlot] != "B" {
		t.Errorf("META after delete: %v", values)
	}
}
