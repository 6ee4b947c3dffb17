package images

import (
	"os"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
)

func TestDefaultImages(t *testing.T) {
	seen := map[string]bool{}

	for _, img := range Default() {
		ref, err := name.NewTag(img.Ref, name.StrictValidation)
		if err != nil {
			t.Errorf("%s: %v", img.Ref, err)

			continue
		}

		if ref.Name() != img.Ref {
			t.Errorf("%s parses as %s: give the registry and tag in full", img.Ref, ref.Name())
		}

		if seen[img.Ref] {
			t.Errorf("%s is listed twice", img.Ref)
		}

		seen[img.Ref] = true

		if len(img.Entrypoint) == 0 || !strings.HasPrefix(img.Entrypoint[0], "/") {
			t.Errorf("%s: entrypoint %v is not an absolute path", img.Ref, img.Entrypoint)
		}
	}

	if len(seen) != 9 {
		t.Errorf("%d images, want the 9 of upstream's list less the installer", len(seen))
	}
}

// TestDefaultList checks upstream v1.11's `talosctl image default` order and names.
func TestDefaultList(t *testing.T) {
	want := []string{
		"ghcr.io/siderolabs/flannel:" + FlannelVersion,
		"registry.k8s.io/coredns/coredns:" + CoreDNSVersion,
		"gcr.io/etcd-development/etcd:" + EtcdVersion,
		"registry.k8s.io/kube-apiserver:v1.34.0",
		"registry.k8s.io/kube-controller-manager:v1.34.0",
		"registry.k8s.io/kube-scheduler:v1.34.0",
		"registry.k8s.io/kube-proxy:v1.34.0",
		"ghcr.io/siderolabs/kubelet:v1.34.0",
		Installer(),
		"registry.k8s.io/pause:3.10",
	}

	got := DefaultList()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("list:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	if !strings.HasPrefix(Installer(), "ghcr.io/siderolabs/installer:v1.") {
		t.Errorf("installer %s", Installer())
	}
}

// TestEtcdVersion keeps the etcd image's tag at the etcd our go.mod builds (cmd/etcd).
func TestEtcdVersion(t *testing.T) {
	data, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}

	if !strings.Contains(string(data), "go.etcd.io/etcd/server/v3 "+EtcdVersion+"\n") {
		t.Errorf("go.mod does not require go.etcd.io/etcd/server/v3 %s: set EtcdVersion to the version it builds", EtcdVersion)
	}
}
