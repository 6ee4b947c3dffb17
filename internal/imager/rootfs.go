package imager

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/talos-go/talos/internal/images"
)

// Paths of the node binaries in the rootfs. /sbin is a link to /usr/sbin, so /sbin/init is
// machined.
const (
	InitPath = "/usr/sbin/init"
	EtcdPath = "/usr/bin/etcd"
	// apid and trustd on their own, next to machined, which runs them when present.
	ApidPath   = "/usr/sbin/apid"
	TrustdPath = "/usr/sbin/trustd"
)

// Archives of the node image's cache: the Kubernetes images, and etcd's image alone (in
// container mode etcd runs from it through containerd, as upstream).
const (
	KubernetesImagesArchive = ImageCacheDir + "/kubernetes.tar"
	EtcdImageArchive        = ImageCacheDir + "/etcd.tar"
)

// RootfsOptions are the inputs of a node rootfs.
type RootfsOptions struct {
	Out      string // squashfs to write
	CacheDir string // tool builds and the last build's digest; default <dir of Out>/cache
	Machined string // the multi-call binary, built by the caller
	Etcd     string
	// Apid and Trustd are those programs built alone (optional): without them the node runs
	// them from the multi-call binary, whose processes carry all of machined's packages.
	Apid, Trustd string
	Version      string   // for /etc/os-release
	Images       []string // OCI archives for the image cache
	// Kubernetes adds the Kubernetes images (internal/images) to the image cache and the flannel
	// CNI plugin to /opt/cni/bin, built from Repo (the repository root).
	Kubernetes bool
	Repo       string
	Squashfs   SquashfsOptions
	Progress   io.Writer
}

// RootfsResult describes a built rootfs.
type RootfsResult struct {
	Size     int64  // bytes of the squashfs
	Content  int64  // bytes of the files in it, uncompressed
	SHA256   string // of the squashfs
	Cached   bool   // the tree had not changed, so the last squashfs was kept
	Programs int    // binaries checked in a chroot
}

// BuildRootfs builds the node rootfs: the pinned tools, the Debian userland with its libraries,
// the layout and /etc; checks that its programs run in a chroot of it; and squashes it.
func BuildRootfs(ctx context.Context, opts RootfsOptions) (*RootfsResult, error) {
	if err := opts.prepare(); err != nil {
		return nil, err
	}

	steps := 4
	if opts.Kubernetes {
		steps++
	}

	step := stepper(opts.Progress, steps)
	t := NewTree()

	if err := layout(t); err != nil {
		return nil, err
	}

	step("pinned tools: containerd %s, runc %s, CNI plugins %s", containerdVer, runcVer, cniVer)

	b := &ToolBuilder{CacheDir: filepath.Join(opts.CacheDir, "tools"), Progress: opts.Progress}

	for _, tool := range Tools() {
		bin, err := b.Build(ctx, tool)
		if err != nil {
			return nil, err
		}

		if err = t.File(filepath.Join(tool.Dest, tool.Name), bin, 0o755); err != nil {
			return nil, err
		}
	}

	if opts.Kubernetes {
		if err := addKubernetes(ctx, t, opts, step); err != nil {
			return nil, err
		}
	}

	step("node binaries, Debian userland (%s), /etc", strings.Join(append(DebianUserland.Packages, DiskUserland.Packages...), ", "))

	if err := addNodeBinaries(t, opts); err != nil {
		return nil, err
	}

	for _, u := range []Userland{DebianUserland, DiskUserland} {
		if _, err := u.Stage(ctx, t); err != nil {
			return nil, err
		}
	}

	if err := etcFiles(t, opts.Version); err != nil {
		return nil, err
	}

	for _, img := range opts.Images {
		if !strings.HasSuffix(img, ".tar") {
			return nil, fmt.Errorf("image cache entry %s: give OCI archives (.tar)", img)
		}

		if err := t.File(filepath.Join(ImageCacheDir, filepath.Base(img)), img, 0o644); err != nil {
			return nil, err
		}
	}

	return squashCached(ctx, t, opts, step)
}

// prepare checks the options and fills in the defaults: no progress, the cache beside Out (an
// absolute path).
func (opts *RootfsOptions) prepare() error {
	if opts.Out == "" || opts.Machined == "" || opts.Etcd == "" {
		return errors.New("rootfs needs --out, --machined and --etcd")
	}

	if opts.Version == "" {
		return errors.New("rootfs needs --version (for /etc/os-release)")
	}

	if err := CheckVersion(opts.Version); err != nil {
		return err
	}

	if opts.Progress == nil {
		opts.Progress = io.Discard
	}

	if opts.CacheDir == "" {
		opts.CacheDir = filepath.Join(filepath.Dir(opts.Out), "cache")
	}

	// The go command runs in each module's folder: every path it gets must be absolute.
	cache, err := filepath.Abs(opts.CacheDir)
	if err != nil {
		return err
	}

	opts.CacheDir = cache

	if err := os.MkdirAll(filepath.Join(opts.CacheDir, "tools"), 0o755); err != nil {
		return err
	}

	return nil
}

// addNodeBinaries adds machined, etcd, and apid and trustd when given (static binaries, checked), and etcd's image archive.
func addNodeBinaries(t *Tree, opts RootfsOptions) error {
	for _, f := range []struct{ path, src string }{{InitPath, opts.Machined}, {EtcdPath, opts.Etcd}, {ApidPath, opts.Apid}, {TrustdPath, opts.Trustd}} {
		if f.src == "" {
			continue // Apid, Trustd: optional
		}

		if err := checkStatic(f.src); err != nil {
			return fmt.Errorf("%s: %w", f.src, err)
		}

		if err := t.File(f.path, f.src, 0o755); err != nil {
			return err
		}
	}

	// etcd's image in its own small archive: container mode runs etcd from it, and etcd starts
	// without waiting for the Kubernetes images' import.
	etcdImage := filepath.Join(opts.CacheDir, "etcd-image.tar")
	if err := WriteImageArchive(etcdImage, ImageSpec{
		Ref:        images.Etcd,
		Files:      []ImageFile{{Path: images.EtcdPath, Source: opts.Etcd, Mode: 0o755}},
		Entrypoint: []string{images.EtcdPath},
	}); err != nil {
		return err
	}

	if err := t.File(EtcdImageArchive, etcdImage, 0o644); err != nil {
		return err
	}

	return nil
}

// addKubernetes builds the Kubernetes images into the image cache and the flannel CNI plugin
// into /opt/cni/bin.
func addKubernetes(ctx context.Context, t *Tree, opts RootfsOptions, step func(string, ...any)) error {
	step("Kubernetes images: Kubernetes %s, CoreDNS %s, flannel %s, pause %s, etcd %s", images.KubernetesVersion,
		images.CoreDNSVersion, images.FlannelVersion, images.PauseVersion, images.EtcdVersion)

	repo, err := filepath.Abs(opts.Repo)
	if err != nil {
		return err
	}

	res, err := BuildKubernetesImages(ctx, KubernetesOptions{Repo: repo, CacheDir: opts.CacheDir, Etcd: opts.Etcd, Progress: opts.Progress})
	if err != nil {
		return err
	}

	for _, img := range images.Default() {
		if _, ok := res.Sizes[img.Ref]; !ok {
			continue // etcd: in its own archive
		}

		fmt.Fprintf(opts.Progress, "  %-48s %6.1f MB\n", img.Ref, float64(res.Sizes[img.Ref])/1e6)
	}

	how := "written"
	if res.Cached {
		how = "cached"
	}

	fi, err := os.Stat(res.Archive)
	if err != nil {
		return err
	}

	fmt.Fprintf(opts.Progress, "  archive %s: %.1f MB (%s; shared layers stored once)\n", filepath.Base(res.Archive), float64(fi.Size())/1e6, how)

	if err = t.File(KubernetesImagesArchive, res.Archive, 0o644); err != nil {
		return err
	}

	return t.File(images.FlannelCNIPath, res.FlannelCNI, 0o755)
}

// squashCached checks and squashes the tree, unless the last build had the same tree and
// options and its output is still there unchanged.
func squashCached(ctx context.Context, t *Tree, opts RootfsOptions, step func(string, ...any)) (*RootfsResult, error) {
	digest, err := t.Digest()
	if err != nil {
		return nil, err
	}

	content, err := t.Size()
	if err != nil {
		return nil, err
	}

	stamp := filepath.Join(opts.CacheDir, filepath.Base(opts.Out)+".digest")
	want := fmt.Sprintf("%s %v", digest, opts.Squashfs)

	if old, err := os.ReadFile(stamp); err == nil {
		fields := strings.SplitN(string(old), "\n", 2)
		if len(fields) == 2 && fields[0] == want {
			if sum, size, _, err := digestFile(opts.Out); err == nil && sum == strings.TrimSpace(fields[1]) {
				step("chroot check: skipped, the tree is unchanged")
				step("squashfs: unchanged since the last build (%s)", opts.Out)

				return &RootfsResult{Size: size, Content: content, SHA256: sum, Cached: true}, nil
			}
		}
	}

	stage, err := os.MkdirTemp(filepath.Dir(opts.Out), ".rootfs-stage-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(stage)

	root := filepath.Join(stage, "root")
	if err = t.WriteTo(root); err != nil {
		return nil, err
	}

	step("chroot check: programs run with the image's own libraries")

	n, err := CheckChroot(ctx, root, opts.Progress)
	if err != nil {
		return nil, err
	}

	step("squashfs (%s, %d MB of files)", compressionName(opts.Squashfs), content>>20)

	if err = squashDir(ctx, root, opts.Out, opts.Squashfs); err != nil {
		return nil, err
	}

	sum, size, _, err := digestFile(opts.Out)
	if err != nil {
		return nil, err
	}

	if err = os.WriteFile(stamp, []byte(want+"\n"+sum+"\n"), 0o644); err != nil {
		return nil, err
	}

	return &RootfsResult{Size: size, Content: content, SHA256: sum, Programs: n}, nil
}

func compressionName(o SquashfsOptions) string {
	if o.Compression == "" {
		return "zstd"
	}

	return o.Compression
}

// stepper prints numbered steps with the time since the build started.
func stepper(w io.Writer, total int) func(string, ...any) {
	n, start := 0, time.Now()

	return func(format string, args ...any) {
		n++
		fmt.Fprintf(w, "[%d/%d %5.1fs] %s\n", n, total, time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
}
