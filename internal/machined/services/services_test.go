package services

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"

	"github.com/talos-go/talos/internal/machined/resources"
	"github.com/talos-go/talos/internal/machined/runtime"
)

func TestFor(t *testing.T) {
	r := &runtime.Runtime{Paths: runtime.Paths{Root: t.TempDir()}, Address: "127.0.0.1"}

	for _, tc := range []struct {
		typ  machine.Type
		want []string
	}{
		{machine.TypeWorker, []string{"apid"}},
		{machine.TypeControlPlane, []string{"apid", "trustd", "etcd"}},
		{machine.TypeInit, []string{"apid", "trustd", "etcd"}},
	} {
		var got []string
		for _, svc := range For(r, tc.typ) {
			got = append(got, svc.ID)
		}

		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: services %v, want %v", tc.typ, got, tc.want)
		}
	}
}

func TestWaitFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "secrets") // created by the wait
	names := []string{"a", "b"}

	done := make(chan error, 1)

	go func() { done <- waitFiles(context.Background(), dir, names) }()

	// Written as the secrets controllers write: a temporary file renamed into place.
	for _, name := range names {
		select {
		case err := <-done:
			t.Fatalf("returned before %s existed: %v", name, err)
		case <-time.After(50 * time.Millisecond):
		}

		tmp := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(tmp, []byte(name), 0o600); err != nil {
			t.Fatal(err)
		}

		for !exists(dir) {
			time.Sleep(time.Millisecond)
		}

		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}

	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// A wait that never sees its files ends with its context.
	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- waitFiles(ctx, dir, []string{"never"}) }()

	cancel()

	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled wait: %v", err)
	}
}

func exists(p string) bool {
	_, err := os.Stat(p)

	return err == nil
}

func TestWaitResource(t *testing.T) {
	st, err := resources.NewState(context.Background())
	if err != nil {
		t.Fatal(err)
	}

	done := make(chan error, 1)

	go func() { done <- waitResource(context.Background(), st, secrets.NewAPI().Metadata()) }()

	select {
	case err := <-done:
		t.Fatalf("returned before the resource existed: %v", err)
	case <-time.After(50 * time.Millisecond):
	}

	if err = st.Create(context.Background(), secrets.NewAPI()); err != nil {
		t.Fatal(err)
	}

	if err = <-done; err != nil {
		t.Fatal(err)
	}
}
