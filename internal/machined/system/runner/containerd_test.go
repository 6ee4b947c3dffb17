package runner_test

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/talos-go/talos/internal/machined/runtime"
	"github.com/talos-go/talos/internal/machined/services"
	"github.com/talos-go/talos/internal/machined/system/runner"
)

// containerdBins finds containerd, its shim and runc: $CONTAINERD_BIN_DIR, the tool cache of
// `make rootfs`, or PATH.
func containerdBins(t *testing.T) []string {
	t.Helper()

	var dirs []string
	if d := os.Getenv("CONTAINERD_BIN_DIR"); d != "" {
		dirs = append(dirs, d)
	}

	cached, _ := filepath.Glob("../../../../_out/cache/tools/*")
	dirs = append(dirs, cached...)
	dirs = append(dirs, filepath.SplitList(os.Getenv("PATH"))...)

	found := map[string]string{}

	for _, bin := range []string{"containerd", "containerd-shim-runc-v2", "runc"} {
		for _, d := range dirs {
			if p, err := filepath.Abs(filepath.Join(d, bin)); err == nil {
				if _, err = os.Stat(p); err == nil {
					found[bin] = filepath.Dir(p)

					break
				}
			}
		}

		if found[bin] == "" {
			t.Skipf("%s not found: run `make rootfs` (it builds containerd, the shim and runc into _out/cache) or set CONTAINERD_BIN_DIR", bin)
		}
	}

	return []string{found["containerd"], found["containerd-shim-runc-v2"], found["runc"]}
}

// startContainerd runs a real containerd in a temporary root with a private socket.
func startContainerd(t *testing.T) services.ContainerdPaths {
	t.Helper()

	if os.Geteuid() != 0 {
		t.Skip("containerd needs root")
	}

	bins := containerdBins(t)
	root, err := os.MkdirTemp("", "ctrd-")
	if err != nil {
		t.Fatal(err)
	}

	paths := services.NewContainerdPaths(runtime.Paths{Root: root})
	if err = services.WriteContainerdConfig(paths); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())

	var log bytes.Buffer

	cmd := exec.CommandContext(ctx, filepath.Join(bins[0], "containerd"), "--config", paths.Config)
	cmd.Env = []string{"PATH=" + strings.Join(bins, ":") + ":/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.Stdout, cmd.Stderr = &log, &log

	if err = cmd.Start(); err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() {
		cancel()
		cmd.Wait()                               //nolint:errcheck
		exec.Command("umount", "-R", root).Run() //nolint:errcheck
		os.RemoveAll(root)                       //nolint:errcheck

		if t.Failed() {
			t.Logf("containerd log:\n%s", log.String())
		}
	})

	deadline := time.Now().Add(30 * time.Second)
	for services.ContainerdHealth(ctx, paths.Socket) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("containerd did not come up:\n%s", log.String())
		}

		time.Sleep(200 * time.Millisecond)
	}

	return paths
}

const helloSource = `package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM)
	fmt.Println("hello from the container", os.Args[1:])
	<-ch
	fmt.Println("bye: SIGTERM")
}
`

// helloImage builds a static Go program and writes a one-layer image of it as an archive.
func helloImage(t *testing.T, ref string) string {
	t.Helper()

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(helloSource), 0o644); err != nil {
		t.Fatal(err)
	}

	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module hello\n\ngo 1.22\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	build := exec.Command("go", "build", "-o", "hello", ".")
	build.Dir = dir
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=", "GOWORK=off")

	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the test program: %v\n%s", err, out)
	}

	bin, err := os.ReadFile(filepath.Join(dir, "hello"))
	if err != nil {
		t.Fatal(err)
	}

	var layerTar bytes.Buffer

	tw := tar.NewWriter(&layerTar)
	if err = tw.WriteHeader(&tar.Header{Name: "hello", Mode: 0o755, Size: int64(len(bin)), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}

	tw.Write(bin) //nolint:errcheck
	tw.Close()    //nolint:errcheck

	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layerTar.Bytes())), nil })
	if err != nil {
		t.Fatal(err)
	}

	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		t.Fatal(err)
	}

	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}

	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config = v1.Config{Entrypoint: []string{"/hello"}, Cmd: []string{"from-image"}}

	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}

	tag, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}

	archive := filepath.Join(dir, "hello.tar")
	if err = tarball.WriteToFile(archive, tag, img); err != nil {
		t.Fatal(err)
	}

	return archive
}

// syncBuffer is an output the runner's FIFO copier and the test share.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()

	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()

	return b.buf.String()
}

func TestContainerdRunner(t *testing.T) {
	paths := startContainerd(t)
	ref := "registry.local/hello:v1"
	archive := helloImage(t, ref)

	// An image neither in containerd nor in an archive: a clear error, nothing pulled.
	missing := &runner.Containerd{Socket: paths.Socket, ID: "missing", Image: "registry.local/none:v1", FIFODir: paths.FIFO}
	if err := missing.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "nothing is pulled") {
		t.Fatalf("an image nowhere: got %v", err)
	}

	out := &syncBuffer{}
	r := &runner.Containerd{Socket: paths.Socket, ID: "hello", Image: ref, Archive: archive, HostNetwork: true,
		FIFODir: paths.FIFO, Output: out, GracefulTimeout: 10 * time.Second}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)

	go func() { done <- r.Run(ctx) }()

	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(out.String(), "hello from the container [from-image]") {
		select {
		case err := <-done:
			t.Fatalf("the runner returned before the container ran: %v\n%s", err, out.String())
		default:
		}

		if time.Now().After(deadline) {
			t.Fatalf("no output from the container: %q", out.String())
		}

		time.Sleep(100 * time.Millisecond)
	}

	client, err := containerd.New(paths.Socket, containerd.WithDefaultNamespace(runner.SystemNamespace))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close() //nolint:errcheck

	if _, err = client.LoadContainer(context.Background(), "hello"); err != nil {
		t.Fatalf("the container is not in the system namespace: %v", err)
	}

	cancel()

	if err = <-done; err != nil {
		t.Fatalf("stopping: %v", err)
	}

	if !strings.Contains(out.String(), "bye: SIGTERM") {
		t.Errorf("the container did not get SIGTERM: %q", out.String())
	}

	if _, err = client.LoadContainer(context.Background(), "hello"); !errdefs.IsNotFound(err) {
		t.Errorf("the container is left after the runner stopped: %v", err)
	}

	// The image stays imported: a second run needs no archive.
	r2 := &runner.Containerd{Socket: paths.Socket, ID: "hello2", Image: ref, Args: []string{"/hello", "again"}, FIFODir: paths.FIFO, Output: out}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel2()

	go func() {
		for !strings.Contains(out.String(), "[again]") && ctx2.Err() == nil {
			time.Sleep(100 * time.Millisecond)
		}

		cancel2()
	}()

	if err = r2.Run(ctx2); err != nil || !strings.Contains(out.String(), "[again]") {
		t.Fatalf("a second run from the imported image: %v %q", err, out.String())
	}
}
