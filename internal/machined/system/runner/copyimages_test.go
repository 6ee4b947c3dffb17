package runner_test

import (
	"context"
	"strings"
	"testing"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/pkg/namespaces"

	"github.com/talos-go/talos/internal/machined/system/runner"
	"github.com/talos-go/talos/internal/machined/testutil/ctrdtest"
	"github.com/talos-go/talos/internal/testenv"
)

// TestCopyImages: an image imported into k8s.io and shared with the system namespace runs
// there, also after k8s.io deleted it and containerd collected its garbage: the system
// namespace holds its own references to every blob.
func TestCopyImages(t *testing.T) {
	paths, _ := ctrdtest.StartContainerd(t)
	ref := "registry.local/shared:v1"
	archive := ctrdtest.HelloImage(t, ref)

	client, err := containerd.New(paths.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()

	k8s := namespaces.WithNamespace(t.Context(), "k8s.io")

	names, err := runner.ImportArchive(k8s, client, archive)
	if err != nil {
		t.Fatal(err)
	}

	if err = runner.CopyImages(t.Context(), client, "k8s.io", runner.SystemNamespace, names); err != nil {
		t.Fatal(err)
	}

	// A synchronous delete collects garbage: what the system namespace does not reference goes.
	if err = client.ImageService().Delete(k8s, ref, images.SynchronousDelete()); err != nil {
		t.Fatal(err)
	}

	var blobs int

	if err = client.ContentStore().Walk(namespaces.WithNamespace(t.Context(), runner.SystemNamespace), func(content.Info) error {
		blobs++

		return nil
	}); err != nil {
		t.Fatal(err)
	}

	if blobs != 3 { // manifest, config, layer
		t.Fatalf("the system namespace holds %d blobs of the image after garbage collection, want its 3", blobs)
	}

	// Again is fine (every boot imports the cache again).
	if _, err = runner.ImportArchive(k8s, client, archive); err != nil {
		t.Fatal(err)
	}

	if err = runner.CopyImages(t.Context(), client, "k8s.io", runner.SystemNamespace, names); err != nil {
		t.Fatalf("a second copy: %v", err)
	}

	out := &testenv.SyncBuffer{}
	r := &runner.Containerd{Socket: paths.Socket, ID: "shared", Image: ref, Args: []string{"/hello", "shared"}, FIFODir: paths.FIFO, Output: out}

	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()

	go func() {
		for !strings.Contains(out.String(), "[shared]") && ctx.Err() == nil {
			time.Sleep(100 * time.Millisecond)
		}

		cancel()
	}()

	if err = r.Run(ctx); err != nil || !strings.Contains(out.String(), "[shared]") {
		t.Fatalf("running the shared image in %s after k8s.io deleted it: %v %q", runner.SystemNamespace, err, out.String())
	}
}
