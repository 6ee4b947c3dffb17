package imager_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"

	"github.com/talos-go/talos/internal/imager"
	"github.com/talos-go/talos/internal/images"
	"github.com/talos-go/talos/internal/machined/system/runner"
	"github.com/talos-go/talos/internal/machined/testutil/ctrdtest"
)

// TestImagesArchiveImports imports the archive of the node's images into a real containerd, as
// the node does at boot, and unpacks every image: the hand-written multi-image archive is one
// containerd reads.
func TestImagesArchiveImports(t *testing.T) {
	paths, _ := ctrdtest.StartContainerd(t)

	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")

	if err := os.WriteFile(bin, []byte("binary"), 0o755); err != nil {
		t.Fatal(err)
	}

	specs, err := imager.KubernetesImageSpecs(context.Background(), imager.KubernetesBinaries{Kube: bin, CoreDNS: bin, Flanneld: bin, Pause: bin, Etcd: bin})
	if err != nil {
		t.Fatal(err)
	}

	archive := filepath.Join(dir, "kubernetes.tar")
	if _, err = imager.WriteImagesArchive(archive, specs...); err != nil {
		t.Fatal(err)
	}

	client, err := containerd.New(paths.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()

	ctx := namespaces.WithNamespace(context.Background(), "k8s.io")

	names, err := runner.ImportArchive(ctx, client, archive)
	if err != nil {
		t.Fatal(err)
	}

	for _, img := range images.Default() {
		if !slices.Contains(names, img.Ref) {
			t.Errorf("%s not imported (got %v)", img.Ref, names)

			continue
		}

		ci, err := client.GetImage(ctx, img.Ref)
		if err != nil {
			t.Fatal(err)
		}

		if err = ci.Unpack(ctx, ""); err != nil {
			t.Errorf("unpacking %s: %v", img.Ref, err)
		}
	}
}
