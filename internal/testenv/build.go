// Package testenv is the one test environment of the integration suites: it builds the node
// binaries (machined, etcd, talosctl) once per test process, starts machined processes on
// loopback addresses, and gives tests their deadlines, waits and small file helpers.
//
// It lives outside internal/machined because apid, trustd, etcd, talosctl, provision and the
// end-to-end suites use it as much as machined's own tests do.
package testenv

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// The caches of the user who started the tests: tests point HOME elsewhere (t.Setenv), which
// must not send go build to an empty cache and module folder.
var startHome, startCache = os.Getenv("HOME"), os.Getenv("XDG_CACHE_HOME")

// etcdCache is where etcd is built, in that user's cache: it outlives the test process.
var etcdCache = func() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		dir = os.TempDir()
	}

	return filepath.Join(dir, "talos-go-test", "etcd")
}()

// Every binary is built once per test process into one folder: machined looks for etcd next to
// itself, and talosctl's cluster create for machined next to itself.
var bins = struct {
	sync.Mutex
	dir  string
	done map[string]error
}{done: map[string]error{}}

// built runs produce for name once per test process and returns name's path in the folder.
func built(name string, produce func(path string) error) (string, error) {
	bins.Lock()
	defer bins.Unlock()

	if bins.dir == "" {
		// Named by this process's pid: no hook runs when a test process ends, so each one
		// removes the folders of those that are gone (about 240 MB each), which would otherwise
		// fill the disk run after run.
		removeStaleBinDirs()

		dir := filepath.Join(os.TempDir(), fmt.Sprintf("%s%d", binDirPrefix, os.Getpid()))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return "", err
		}

		bins.dir = dir
	}

	path := filepath.Join(bins.dir, name)

	err, ok := bins.done[name]
	if !ok {
		err = produce(path)
		bins.done[name] = err
	}

	return path, err
}

const binDirPrefix = "talos-go-bin-"

// removeStaleBinDirs removes the binary folders of test processes that no longer run, after
// killing what still runs from them: the nodes of a killed run's clusters (talosctl cluster
// create detaches them on purpose), which would hold their addresses against this run.
func removeStaleBinDirs() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), binDirPrefix+"*"))
	for _, d := range dirs {
		pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), binDirPrefix))
		if err != nil || pid == os.Getpid() {
			continue
		}

		if pid > 0 && pid <= 1<<22 && !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			continue // alive (or not ours to signal): in use
		}

		killRunningFrom(d)
		_ = os.RemoveAll(d)
	}
}

// killRunningFrom kills every process whose executable is in dir.
func killRunningFrom(dir string) {
	exes, _ := filepath.Glob("/proc/[0-9]*/exe")
	for _, exe := range exes {
		target, err := os.Readlink(exe)
		if err != nil || !strings.HasPrefix(target, dir+"/") {
			continue
		}

		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(exe))); err == nil && pid != os.Getpid() {
			fmt.Fprintf(os.Stderr, "testenv: killing %d (%s), left by a test run that is gone\n", pid, target)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// GoBuild runs `go build args...` with the Go caches of the user who started the tests, for a
// suite that needs its own build flags (the container suite's static binaries).
func GoBuild(args ...string) ([]byte, error) {
	cmd := exec.Command("go", append([]string{"build"}, args...)...)
	cmd.Env = append(os.Environ(), "HOME="+startHome, "XDG_CACHE_HOME="+startCache)

	return cmd.CombinedOutput()
}

// goBuild builds pkg to the path it is given.
func goBuild(pkg string, flags ...string) func(string) error {
	return func(path string) error {
		if out, err := GoBuild(append(append(flags, "-o", path), "github.com/talos-go/talos/"+pkg)...); err != nil {
			return fmt.Errorf("building %s: %w\n%s", pkg, err, out)
		}

		return nil
	}
}

func must(t testing.TB, path string, err error) string {
	t.Helper()

	if err != nil {
		t.Fatal(err)
	}

	return path
}

// MachinedBinary builds the multi-call node binary (machined, apid, trustd) and returns its path.
func MachinedBinary(t testing.TB) string {
	t.Helper()

	path, err := built("machined", goBuild("cmd/machined"))

	return must(t, path, err)
}

// MachinedVersion builds the node binary reporting version tag, for upgrade tests.
func MachinedVersion(t testing.TB, tag string) string {
	t.Helper()

	path, err := built("machined-"+tag, goBuild("cmd/machined", "-ldflags", "-X github.com/talos-go/talos/internal/version.Tag="+tag))

	return must(t, path, err)
}

// TalosctlBinary builds talosctl and returns its path.
func TalosctlBinary(t testing.TB) string {
	t.Helper()

	path, err := built("talosctl", goBuild("cmd/talosctl"))

	return must(t, path, err)
}

var etcd struct {
	once sync.Once
	path string
	err  error
}

// EtcdBinary returns our etcd command: $TALOS_ETCD_BINARY, or built once into the user's cache
// (go build leaves an up-to-date binary alone, so later runs skip the link). Under -short it
// skips the test, which starts real etcd processes.
func EtcdBinary(t testing.TB) string {
	t.Helper()

	if testing.Short() {
		t.Skip("starts real etcd processes")
	}

	path, err := etcdBinary()

	return must(t, path, err)
}

func etcdBinary() (string, error) {
	etcd.once.Do(func() {
		if etcd.path = os.Getenv("TALOS_ETCD_BINARY"); etcd.path != "" {
			return
		}

		etcd.path = etcdCache
		etcd.err = lockedBuild(etcdCache, goBuild("cmd/etcd"))
	})

	return etcd.path, etcd.err
}

// lockedBuild builds into a path shared by test processes (go test runs packages in
// parallel): one at a time, so none runs a file that another is still writing.
func lockedBuild(path string, build func(string) error) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}

	lock, err := os.OpenFile(path+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	defer lock.Close()

	if err = syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}

	return build(path)
}

// EtcdNextToMachined copies etcd into the folder of the node binaries, where machined looks for
// it first, and returns the copy's path.
func EtcdNextToMachined(t testing.TB) string {
	t.Helper()

	src := EtcdBinary(t)
	path, err := built("etcd", func(dst string) error { return copyFile(src, dst) })

	return must(t, path, err)
}

// Binaries builds machined, talosctl and etcd into one folder and returns it: what a TestMain
// needs before it runs `talosctl cluster create`.
func Binaries() (string, error) {
	for _, name := range []string{"machined", "talosctl"} {
		if _, err := built(name, goBuild("cmd/"+name)); err != nil {
			return "", err
		}
	}

	src, err := etcdBinary()
	if err != nil {
		return "", err
	}

	path, err := built("etcd", func(dst string) error { return copyFile(src, dst) })

	return filepath.Dir(path), err
}

// RemoveBinaries deletes what this process built; a TestMain calls it after m.Run.
func RemoveBinaries() {
	bins.Lock()
	defer bins.Unlock()

	if bins.dir != "" {
		os.RemoveAll(bins.dir)
	}

	bins.dir, bins.done = "", map[string]error{}
}

// copyFile copies rather than links, so the folder holds the binaries themselves as a node's
// would, whatever later happens to the user's cache.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()

	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}

	if _, err = io.Copy(out, in); err != nil {
		out.Close()

		return err
	}

	return out.Close()
}
