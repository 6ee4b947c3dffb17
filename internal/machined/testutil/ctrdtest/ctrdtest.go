// Package ctrdtest starts a real containerd for tests and builds a small image for it.
package ctrdtest

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/talos-go/talos/internal/imager"
	mdruntime "github.com/talos-go/talos/internal/machined/runtime"
	"github.com/talos-go/talos/internal/machined/services"
)

// repoRoot is the repository's folder, found from this file's path.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)

	return filepath.Join(filepath.Dir(file), "..", "..", "..", "..")
}

// containerdBins finds containerd, its shim and runc: $CONTAINERD_BIN_DIR, the tool cache of
// `make rootfs`, or PATH.
func containerdBins(t *testing.T) []string {
	t.Helper()

	var dirs []string
	if d := os.Getenv("CONTAINERD_BIN_DIR"); d != "" {
		dirs = append(dirs, d)
	}

	cached, _ := filepath.Glob(filepath.Join(repoRoot(), "_out/cache/tools/*"))
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

// StartContainerd runs a real containerd in a temporary node state folder (returned) with a
// private socket, its paths changed by opts before its config is written. It skips the test
// without root or without the binaries.
func StartContainerd(t *testing.T, opts ...func(*services.ContainerdPaths)) (services.ContainerdPaths, string) {
	t.Helper()

	if os.Geteuid() != 0 {
		t.Skip("containerd needs root")
	}

	bins := containerdBins(t)
	root, err := os.MkdirTemp("", "ctrd-")
	if err != nil {
		t.Fatal(err)
	}

	paths := services.NewContainerdPaths(mdruntime.Paths{Root: root})
	for _, opt := range opts {
		opt(&paths)
	}

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
		cmd.Wait()
		exec.Command("umount", "-R", root).Run()
		os.RemoveAll(root)

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

	return paths, root
}

// helloSource prints its arguments, then waits for SIGTERM and says so.
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

// HelloImage builds a static Go program and writes a one-layer image of it as an archive.
func HelloImage(t *testing.T, ref string) string {
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

	archive := filepath.Join(dir, "hello.tar")

	err := imager.WriteImageArchive(archive, imager.ImageSpec{
		Ref:        ref,
		Files:      []imager.ImageFile{{Path: "/hello", Source: filepath.Join(dir, "hello")}},
		Entrypoint: []string{"/hello"},
		Cmd:        []string{"from-image"},
	})
	if err != nil {
		t.Fatal(err)
	}

	return archive
}
