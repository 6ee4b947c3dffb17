package imager

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/talos-go/talos/internal/images"
	"github.com/talos-go/talos/internal/testenv"
)

func fakeBinaries(t *testing.T) KubernetesBinaries {
	t.Helper()

	dir := t.TempDir()
	b := KubernetesBinaries{}

	for name, p := range map[string]*string{"kube": &b.Kube, "coredns": &b.CoreDNS, "flanneld": &b.Flanneld, "pause": &b.Pause, "etcd": &b.Etcd} {
		*p = filepath.Join(dir, name)
		if err := os.WriteFile(*p, []byte("binary "+name), 0o755); err != nil {
			t.Fatal(err)
		}
	}

	return b
}

// TestKubernetesImageSpecs checks every image of the list: its entrypoint is one of its files
// (through a symlink for the multi-call binary), and what its binary execs is in it.
func TestKubernetesImageSpecs(t *testing.T) {
	specs, err := KubernetesImageSpecs(context.Background(), fakeBinaries(t))
	if err != nil {
		t.Fatal(err)
	}

	if len(specs) != len(images.Default()) {
		t.Fatalf("%d specs for %d images", len(specs), len(images.Default()))
	}

	needs := map[string][]string{
		images.KubeProxy: {"/usr/sbin/iptables", "/usr/sbin/ip6tables", "/usr/sbin/iptables-restore", "/usr/sbin/nft", "/lib64"},
		images.Flannel:   {"/usr/sbin/iptables", "/usr/sbin/nft", "/usr/bin/cp", images.FlanneldPath},
		images.Kubelet:   {"/usr/bin/mount", "/usr/bin/umount"},
	}

	for _, s := range specs {
		files := map[string]ImageFile{}
		for _, f := range append(append([]ImageFile{}, s.Base...), s.Files...) {
			files[f.Path] = f
		}

		entry := s.Entrypoint[0]
		f, ok := files[entry]

		if ok && f.Link != "" {
			f, ok = files[path.Join(path.Dir(entry), f.Link)]
		}

		if !ok || f.Source == "" {
			t.Errorf("%s: entrypoint %s is not a file of the image", s.Ref, entry)
		}

		for _, p := range needs[s.Ref] {
			if _, ok := files[p]; !ok {
				t.Errorf("%s lacks %s", s.Ref, p)
			}
		}
	}
}

// TestWriteImagesArchive writes the images twice (same bytes), reads every image back by its
// reference, and checks that the layer the Kubernetes images share is stored once.
func TestWriteImagesArchive(t *testing.T) {
	specs, err := KubernetesImageSpecs(context.Background(), fakeBinaries(t))
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.tar"), filepath.Join(dir, "b.tar")

	sizes, err := WriteImagesArchive(a, specs...)
	if err != nil {
		t.Fatal(err)
	}

	if _, err = WriteImagesArchive(b, specs...); err != nil {
		t.Fatal(err)
	}

	da, _ := os.ReadFile(a)
	db, _ := os.ReadFile(b)

	if !bytes.Equal(da, db) {
		t.Error("two writes of the same images differ")
	}

	var kubeLayer string

	for _, s := range specs {
		tag, err := name.NewTag(s.Ref)
		if err != nil {
			t.Fatal(err)
		}

		img, err := tarball.ImageFromPath(a, &tag)
		if err != nil {
			t.Fatalf("%s: %v", s.Ref, err)
		}

		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}

		if strings.Join(cf.Config.Entrypoint, " ") != strings.Join(s.Entrypoint, " ") || cf.OS != "linux" {
			t.Errorf("%s: entrypoint %v, os %s", s.Ref, cf.Config.Entrypoint, cf.OS)
		}

		layers, _ := img.Layers()
		if len(layers) != len(s.layers()) {
			t.Errorf("%s: %d layers, want %d", s.Ref, len(layers), len(s.layers()))
		}

		if strings.HasPrefix(s.Ref, images.KubeAPIServerName) {
			d, _ := layers[0].DiffID()
			kubeLayer = d.Hex
		}

		if sizes[s.Ref] == 0 {
			t.Errorf("%s: no size", s.Ref)
		}
	}

	if n := bytes.Count(da, []byte(kubeLayer+".tar\x00")); kubeLayer == "" || n != 1 {
		t.Errorf("the shared Kubernetes layer is stored %d times, want once", n)
	}
}

// TestKubeVersion runs the built components: each says v1.34.0, by its symlink name and by its
// first argument.
func TestKubeVersion(t *testing.T) {
	bin := testenv.KubeBinary(t)
	dir := t.TempDir()

	for _, n := range kubeNames {
		link := filepath.Join(dir, n)
		if err := os.Symlink(bin, link); err != nil {
			t.Fatal(err)
		}

		for _, argv := range [][]string{{link, "--version"}, {bin, n, "--version"}} {
			out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
			if err != nil {
				t.Fatalf("%v: %v\n%s", argv, err, out)
			}

			if !strings.Contains(string(out), "Kubernetes "+images.KubernetesVersion) {
				t.Errorf("%v says %q, want Kubernetes %s", argv, out, images.KubernetesVersion)
			}
		}
	}

	if out, err := exec.Command(bin, "kubectl").CombinedOutput(); err == nil || !strings.Contains(string(out), "kube-apiserver") {
		t.Errorf("an unknown component: %v %s", err, out)
	}
}

func TestLocalToolKey(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	tool := Tool{Name: "x", Dir: dir, Version: "v1"}

	k1, err := tool.key()
	if err != nil {
		t.Fatal(err)
	}

	if err = os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main // changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	k2, _ := tool.key()

	if k1 == k2 {
		t.Error("a change of the local module's source keeps the cached build")
	}

	if err = os.WriteFile(filepath.Join(dir, "main_test.go"), []byte("package main\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	if k3, _ := tool.key(); k3 != k2 {
		t.Error("a test file changed the build's key")
	}
}
