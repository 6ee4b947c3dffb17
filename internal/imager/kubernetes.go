package imager

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/talos-go/talos/internal/images"
)

// KubernetesDir is the Go module of the multi-call Kubernetes binary, in the repository.
const KubernetesDir = "build/kubernetes"

const (
	coreDNSModule = "github.com/coredns/coredns"
	flannelModule = "github.com/flannel-io/flannel"
)

// kubeNames are the components of the multi-call binary: each image has them all as symlinks,
// so the five images share one layer.
var kubeNames = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy", "kubelet"}

// KubernetesTools are the pinned binaries of the Kubernetes images: the multi-call kube from
// the repository's build/kubernetes module, CoreDNS and flanneld from their modules.
func KubernetesTools(repo string) []Tool {
	return []Tool{
		{Name: "kube", Dir: filepath.Join(repo, KubernetesDir), Version: images.KubernetesVersion, Package: ".", LDFlags: KubeVersionLDFlags()},
		{Name: "coredns", Module: coreDNSModule, Version: images.CoreDNSVersion, Package: ".",
			LDFlags: []string{"-X " + coreDNSModule + "/coremain.GitCommit=" + images.CoreDNSVersion}},
		// flannel's udp backend is C on amd64, so flanneld needs cgo, linked statically as
		// flannel's own release does.
		{Name: "flanneld", Module: flannelModule, Version: images.FlannelVersion, Package: ".", CGO: true, Tags: []string{"netgo", "osusergo"},
			LDFlags: []string{"-X " + flannelModule + "/pkg/version.Version=" + images.FlannelVersion, "-extldflags=-static"}},
	}
}

// KubeVersionLDFlags stamp the version Kubernetes' release build stamps, so `--version` and the
// API's /version say v1.34.0, with a fixed date for reproducible bytes.
func KubeVersionLDFlags() []string {
	v := strings.TrimPrefix(images.KubernetesVersion, "v")
	major, rest, _ := strings.Cut(v, ".")
	minor, _, _ := strings.Cut(rest, ".")

	var flags []string

	for _, pkg := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
		for _, kv := range []string{"gitVersion=" + images.KubernetesVersion, "gitMajor=" + major, "gitMinor=" + minor,
			"gitCommit=", "gitTreeState=clean", "buildDate=1970-01-01T00:00:00Z"} {
			flags = append(flags, "-X "+pkg+"."+kv)
		}
	}

	return flags
}

// Userlands of the images: what their binaries exec, from Debian with their libraries.
var (
	// kube-proxy and flanneld run iptables (both backends) and nft.
	netUserland = DebianUserland
	// The kubelet mounts volumes with mount(8).
	mountUserland = Userland{Packages: []string{"mount"}, Programs: []string{"/usr/bin/mount", "/usr/bin/umount", "/usr/sbin/losetup"}}
	// kube-flannel's install-cni init container copies the CNI config with cp.
	cpUserland = Userland{Packages: []string{"coreutils"}, Programs: []string{"/usr/bin/cp"}}
)

// KubernetesBinaries are the programs the images are made of.
type KubernetesBinaries struct {
	Kube, CoreDNS, Flanneld, Pause, Etcd string
}

// KubernetesImageSpecs are the images of internal/images.Default, made of the binaries.
func KubernetesImageSpecs(ctx context.Context, b KubernetesBinaries) ([]ImageSpec, error) {
	kube := []ImageFile{{Path: images.KubeBinDir + "/kube", Source: b.Kube, Mode: 0o755}}
	for _, n := range kubeNames {
		kube = append(kube, ImageFile{Path: images.KubeBinDir + "/" + n, Link: "kube"})
	}

	net, err := userlandFiles(ctx, netUserland)
	if err != nil {
		return nil, err
	}

	mount, err := userlandFiles(ctx, mountUserland)
	if err != nil {
		return nil, err
	}

	cp, err := userlandFiles(ctx, cpUserland)
	if err != nil {
		return nil, err
	}

	own := map[string]ImageSpec{
		images.KubeAPIServer:         {Base: kube},
		images.KubeControllerManager: {Base: kube},
		images.KubeScheduler:         {Base: kube},
		images.KubeProxy:             {Base: kube, Files: net},
		// kubelet reads the users and groups (its user namespace mappings) and the machine id.
		images.Kubelet: {Base: kube, Files: append(mount,
			ImageFile{Path: "/etc/passwd", Data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n")},
			ImageFile{Path: "/etc/group", Data: []byte("root:x:0:\nnogroup:x:65534:\n")})},
		images.CoreDNS: {Files: []ImageFile{{Path: images.CoreDNSPath, Source: b.CoreDNS, Mode: 0o755}}},
		images.Flannel: {Base: net, Files: append([]ImageFile{{Path: images.FlanneldPath, Source: b.Flanneld, Mode: 0o755}}, cp...)},
		images.Pause:   {Files: []ImageFile{{Path: images.PausePath, Source: b.Pause, Mode: 0o755}}},
		images.Etcd:    {Files: []ImageFile{{Path: images.EtcdPath, Source: b.Etcd, Mode: 0o755}}},
	}

	var specs []ImageSpec

	for _, img := range images.Default() {
		s, ok := own[img.Ref]
		if !ok {
			return nil, fmt.Errorf("image %s of the list has no contents here", img.Ref)
		}

		s.Ref, s.Entrypoint = img.Ref, img.Entrypoint
		specs = append(specs, s)
	}

	return specs, nil
}

// userlandFiles stages a userland into a layer's files, with the merged-/usr links its
// programs' loader paths need.
func userlandFiles(ctx context.Context, u Userland) ([]ImageFile, error) {
	t := NewTree()

	if _, err := u.Stage(ctx, t); err != nil {
		return nil, err
	}

	for link, target := range map[string]string{"/bin": "usr/bin", "/sbin": "usr/sbin", "/lib": "usr/lib", "/lib64": "usr/lib64"} {
		if err := t.Symlink(link, target); err != nil {
			return nil, err
		}
	}

	return t.imageFiles()
}

// imageFiles lists the tree as an image layer's entries.
func (t *Tree) imageFiles() ([]ImageFile, error) {
	var files []ImageFile

	for _, p := range t.Paths() {
		e := t.entries[p]

		switch {
		case p == "/":
			continue
		case e.data != nil:
			return nil, fmt.Errorf("%s: an image layer takes files, links and folders", p)
		case e.mode&os.ModeSymlink != 0:
			files = append(files, ImageFile{Path: p, Link: e.target})
		default:
			files = append(files, ImageFile{Path: p, Source: e.src, Mode: int64(e.mode.Perm())})
		}
	}

	return files, nil
}

// KubernetesOptions are the inputs of the Kubernetes images.
type KubernetesOptions struct {
	Repo     string // repository root: build/kubernetes and cmd/ are there
	CacheDir string // tool builds and archives
	Etcd     string // the etcd binary, for its image
	Progress io.Writer
}

// KubernetesResult is what the node image takes: the archives for the image cache and the
// flannel CNI plugin for /opt/cni/bin.
type KubernetesResult struct {
	Archive    string
	FlannelCNI string
	Sizes      map[string]int64 // bytes of each image, by reference
	Cached     bool
}

// BuildKubernetesImages builds the binaries (cached) and writes the images into one archive,
// kept in the cache under a digest of its inputs.
func BuildKubernetesImages(ctx context.Context, opts KubernetesOptions) (*KubernetesResult, error) {
	tb := &ToolBuilder{CacheDir: filepath.Join(opts.CacheDir, "tools"), Progress: opts.Progress}

	bins := map[string]string{}

	for _, tool := range KubernetesTools(opts.Repo) {
		bin, err := tb.Build(ctx, tool)
		if err != nil {
			return nil, err
		}

		bins[tool.Name] = bin
	}

	own := filepath.Join(opts.CacheDir, "own")
	for _, pkg := range []string{"pause", "flannel-cni"} {
		out := filepath.Join(own, pkg)
		if err := goCmd(ctx, opts.Repo, []string{"CGO_ENABLED=0"}, "build", "-trimpath", "-buildvcs=false", "-ldflags", "-s -w -buildid=", "-o", out, "./cmd/"+pkg); err != nil {
			return nil, fmt.Errorf("building %s: %w", pkg, err)
		}

		bins[pkg] = out
	}

	specs, err := KubernetesImageSpecs(ctx, KubernetesBinaries{Kube: bins["kube"], CoreDNS: bins["coredns"], Flanneld: bins["flanneld"], Pause: bins["pause"], Etcd: opts.Etcd})
	if err != nil {
		return nil, err
	}

	// etcd's image goes in its own archive (rootfs.go): etcd starts before the others are in.
	specs = slices.DeleteFunc(specs, func(s ImageSpec) bool { return s.Ref == images.Etcd })

	sum, err := specsDigest(specs)
	if err != nil {
		return nil, err
	}

	res := &KubernetesResult{FlannelCNI: bins["flannel-cni"], Archive: filepath.Join(opts.CacheDir, "images", sum[:16], "kubernetes.tar")}
	sizesFile := res.Archive + ".sizes.json"

	if data, err := os.ReadFile(sizesFile); err == nil && json.Unmarshal(data, &res.Sizes) == nil {
		if _, err = os.Stat(res.Archive); err == nil {
			res.Cached = true

			return res, nil
		}
	}

	if err = os.MkdirAll(filepath.Dir(res.Archive), 0o755); err != nil {
		return nil, err
	}

	fmt.Fprintln(opts.Progress, "  image checks: each image's programs run chrooted into its own files")

	if err = checkImages(ctx, specs, filepath.Dir(res.Archive), opts.Progress); err != nil {
		return nil, err
	}

	if res.Sizes, err = WriteImagesArchive(res.Archive, specs...); err != nil {
		return nil, err
	}

	data, _ := json.Marshal(res.Sizes)

	return res, os.WriteFile(sizesFile, data, 0o644)
}

// specsDigest names the images' inputs: every setting, and the content of every file.
func specsDigest(specs []ImageSpec) (string, error) {
	h := sha256.New()
	sums := map[string]string{}

	spec, _ := json.Marshal(specs)
	h.Write(spec)

	for _, s := range specs {
		for _, f := range append(append([]ImageFile{}, s.Base...), s.Files...) {
			if f.Source == "" || sums[f.Source] != "" {
				continue
			}

			sum, _, _, err := digestFile(f.Source)
			if err != nil {
				return "", err
			}

			sums[f.Source] = sum
		}
	}

	keys := make([]string, 0, len(sums))
	for k := range sums {
		keys = append(keys, k)
	}

	sort.Strings(keys)

	for _, k := range keys {
		fmt.Fprintf(h, "%s %s\n", k, sums[k])
	}

	return hex.EncodeToString(h.Sum(nil)), nil
}
