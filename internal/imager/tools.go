package imager

import (
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// Tool is one pinned binary of the node image, built from its own module at an exact version,
// with that module's own go.mod (its replaces and excludes apply). Every tool is linked
// statically, stripped, built with -trimpath and without VCS stamps, so a rebuild with the same
// Go toolchain gives the same bytes.
type Tool struct {
	Name    string // binary name in the rootfs
	Module  string
	Version string
	// Dir is a local module folder to build instead of Module@Version (build/kubernetes: its
	// go.mod pins the dependencies). Its files' contents go into the cache key, not its path.
	Dir     string `json:"-"`
	Package string // package path inside the module, "." for its root
	Dest    string // folder in the rootfs
	CGO     bool
	Tags    []string
	LDFlags []string // besides -s -w
}

const (
	containerdModule = "github.com/containerd/containerd/v2"
	containerdVer    = "v2.1.4"
	runcModule       = "github.com/opencontainers/runc"
	runcVer          = "v1.3.0"
	cniModule        = "github.com/containernetworking/plugins"
	cniVer           = "v1.7.1"
)

// CNIPlugins are the CNI plugins the image carries in /opt/cni/bin.
var CNIPlugins = []string{"main/bridge", "ipam/host-local", "main/loopback", "meta/portmap", "meta/firewall", "meta/bandwidth"}

// Tools lists the pinned third-party binaries of the node image.
func Tools() []Tool {
	ctrTags := []string{"urfave_cli_no_docs", "no_btrfs", "netgo", "osusergo", "static_build"}
	ctrLD := []string{"-X " + containerdModule + "/version.Version=" + containerdVer, "-X " + containerdModule + "/version.Revision=" + containerdVer}

	tools := []Tool{
		{Name: "containerd", Module: containerdModule, Version: containerdVer, Package: "./cmd/containerd", Dest: "/usr/bin", Tags: ctrTags, LDFlags: ctrLD},
		// The shim talks ttrpc only; no_grpc keeps grpc out of it, as containerd's own release does.
		{Name: "containerd-shim-runc-v2", Module: containerdModule, Version: containerdVer, Package: "./cmd/containerd-shim-runc-v2", Dest: "/usr/bin", Tags: append(append([]string{}, ctrTags...), "no_grpc"), LDFlags: ctrLD},
		// runc needs cgo (its nsenter part is C) and libseccomp, linked statically from
		// Debian's libseccomp-dev.
		{Name: "runc", Module: runcModule, Version: runcVer, Package: ".", Dest: "/usr/bin", CGO: true, Tags: []string{"seccomp", "urfave_cli_no_docs", "netgo", "osusergo"},
			LDFlags: []string{"-X main.version=" + strings.TrimPrefix(runcVer, "v"), "-X main.gitCommit=" + runcVer, "-extldflags=-static"}},
	}

	for _, p := range CNIPlugins {
		tools = append(tools, Tool{Name: filepath.Base(p), Module: cniModule, Version: cniVer, Package: "./plugins/" + p, Dest: "/opt/cni/bin",
			LDFlags: []string{"-X " + cniModule + "/pkg/utils/buildversion.BuildVersion=" + cniVer}})
	}

	return tools
}

// key names a build: the tool's whole spec, the Go toolchain and a local module's sources, so a
// change of any rebuilds.
func (t Tool) key() (string, error) {
	src := ""

	if t.Dir != "" {
		var err error
		if src, err = dirSum(t.Dir); err != nil {
			return "", fmt.Errorf("%s: %w", t.Name, err)
		}
	}

	spec, _ := json.Marshal(struct {
		Tool
		Go, Arch, Src string
	}{t, runtime.Version(), runtime.GOARCH, src})
	sum := sha256.Sum256(spec)

	return t.Name + "-" + t.Version + "-" + hex.EncodeToString(sum[:6]), nil
}

// dirSum hashes the names and contents of a local module's files (go.mod, go.sum, sources),
// skipping test files, which do not reach the binary.
func dirSum(dir string) (string, error) {
	h := sha256.New()

	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(p, "_test.go") {
			return err
		}

		data, err := os.ReadFile(p) //nolint:gosec // our own source tree, read to hash it
		if err != nil {
			return err
		}

		rel, _ := filepath.Rel(dir, p)
		fmt.Fprintf(h, "%s %d\n", rel, len(data))
		h.Write(data)

		return nil
	})

	return hex.EncodeToString(h.Sum(nil)), err
}

// ToolBuilder builds tools into a cache folder; a tool whose build is cached is not built again.
type ToolBuilder struct {
	CacheDir string
	Progress io.Writer
}

// Build returns the path of the tool's binary, building it first if the cache lacks it.
func (b *ToolBuilder) Build(ctx context.Context, t Tool) (string, error) {
	key, err := t.key()
	if err != nil {
		return "", err
	}

	out := filepath.Join(b.CacheDir, key, t.Name)
	if _, err := os.Stat(out); err == nil {
		fmt.Fprintf(b.Progress, "  %-24s %s (cached)\n", t.Name, t.Version)

		return out, nil
	}

	start := time.Now()

	dir := t.Dir
	if dir != "" {
		fmt.Fprintf(b.Progress, "  %-24s %s building from %s (minutes for a large module)\n", t.Name, t.Version, dir)

		if err = goCmd(ctx, dir, nil, "mod", "download"); err != nil {
			return "", fmt.Errorf("downloading the dependencies of %s: %w", dir, err)
		}
	} else {
		fmt.Fprintf(b.Progress, "  %-24s %s building from %s\n", t.Name, t.Version, t.Module)

		if dir, err = moduleDir(ctx, t.Module, t.Version); err != nil {
			return "", err
		}
	}

	tmp, err := os.MkdirTemp(b.CacheDir, ".build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)

	cgo := "0"
	if t.CGO {
		cgo = "1"
	}

	args := []string{"build", "-mod=readonly", "-trimpath", "-buildvcs=false",
		"-tags", strings.Join(t.Tags, ","),
		"-ldflags", strings.Join(append([]string{"-s", "-w", "-buildid="}, t.LDFlags...), " "),
		"-o", filepath.Join(tmp, t.Name), t.Package}

	// The module's folder in the module cache is its own main module: go.mod, go.sum, no
	// vendor folder (module zips leave it out), so -mod=readonly resolves from go.sum.
	if err = goCmd(ctx, dir, []string{"CGO_ENABLED=" + cgo}, args...); err != nil {
		return "", fmt.Errorf("building %s %s: %w", t.Name, t.Version, err)
	}

	if err = checkStatic(filepath.Join(tmp, t.Name)); err != nil {
		return "", fmt.Errorf("%s: %w", t.Name, err)
	}

	if err = os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return "", err
	}

	if err = os.Rename(filepath.Join(tmp, t.Name), out); err != nil {
		return "", err
	}

	fmt.Fprintf(b.Progress, "  %-24s built in %s\n", t.Name, time.Since(start).Round(time.Second))

	return out, nil
}

// moduleDir downloads a module (and the modules its build needs) and returns its folder in the
// module cache.
func moduleDir(ctx context.Context, module, version string) (string, error) {
	var out bytes.Buffer

	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", module+"@"+version)
	cmd.Env = goEnv(nil)
	cmd.Stdout, cmd.Stderr = &out, os.Stderr

	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("downloading %s@%s (the Go module proxy must serve it): %w", module, version, err)
	}

	var info struct{ Dir, Error string }
	if err := json.Unmarshal(out.Bytes(), &info); err != nil || info.Dir == "" {
		return "", fmt.Errorf("downloading %s@%s: %s", module, version, info.Error)
	}

	if err := goCmd(ctx, info.Dir, nil, "mod", "download"); err != nil {
		return "", fmt.Errorf("downloading the dependencies of %s@%s: %w", module, version, err)
	}

	return info.Dir, nil
}

func goCmd(ctx context.Context, dir string, env []string, args ...string) error {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = goEnv(env)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr

	return cmd.Run()
}

// goEnv is the environment of the go command: the caller's, with settings that would make a
// build depend on the machine (a workspace, GOFLAGS, a toolchain download) switched off.
func goEnv(extra []string) []string {
	env := []string{}

	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "GOFLAGS" || k == "GOWORK" || k == "GOTOOLCHAIN" || k == "CGO_ENABLED" || k == "GOOS" || k == "GOARCH" {
			continue
		}

		env = append(env, kv)
	}

	return append(append(env, "GOWORK=off", "GOTOOLCHAIN=local", "GOFLAGS="), extra...)
}

// checkStatic refuses a binary that needs a dynamic loader: the tools must run in the image
// without the host's libraries.
func checkStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()

	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return errors.New("is linked dynamically: the image needs static tools")
		}
	}

	return nil
}
