package imager

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// needTool skips a test when a host tool is missing, except in CI, which installs them.
func needTool(t *testing.T, name, pkg string) {
	t.Helper()

	if _, err := exec.LookPath(name); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is missing: .ci/run must install %s", name, pkg)
		}

		t.Skipf("%s is missing (apt-get install %s)", name, pkg)
	}
}

func TestTreeRefusesConflicts(t *testing.T) {
	tr := NewTree()

	if err := tr.Data("/etc/hosts", []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}

	if err := tr.Data("/etc/hosts", []byte("a"), 0o644); err != nil {
		t.Fatalf("the same entry twice: %v", err)
	}

	if err := tr.Data("/etc/hosts", []byte("b"), 0o644); err == nil || !strings.Contains(err.Error(), "given twice") {
		t.Fatalf("a second, different /etc/hosts: got %v", err)
	}

	if err := tr.Data("/etc/hosts/x", nil, 0o644); err == nil || !strings.Contains(err.Error(), "not a folder") {
		t.Fatalf("a file under a file: got %v", err)
	}

	if err := tr.Dir("relative", 0o755); err == nil {
		t.Fatal("a relative path was accepted")
	}

	if got := strings.Join(tr.Paths(), " "); got != "/ /etc /etc/hosts" {
		t.Fatalf("paths %q", got)
	}
}

// writeTree builds the same tree from host files written in a given order with given times and
// umask, so that only the tree's content can reach the squashfs.
func writeTree(t *testing.T, order []string, mtime time.Time, umask int) *Tree {
	t.Helper()

	src := t.TempDir()
	old := syscall.Umask(umask)

	defer syscall.Umask(old)

	content := map[string]string{"init": "machined", "etcd": "etcd binary", "lib.so": strings.Repeat("library ", 4096)}

	tr := NewTree()
	if err := layout(tr); err != nil {
		t.Fatal(err)
	}

	for _, name := range order {
		p := filepath.Join(src, name)
		if err := os.WriteFile(p, []byte(content[name]), 0o666); err != nil {
			t.Fatal(err)
		}

		if err := os.Chtimes(p, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}

	for _, f := range []struct{ path, name string }{{InitPath, "init"}, {EtcdPath, "etcd"}, {"/usr/lib/x86_64-linux-gnu/libx.so.1", "lib.so"}} {
		if err := tr.File(f.path, filepath.Join(src, f.name), 0o755); err != nil {
			t.Fatal(err)
		}
	}

	if err := tr.Data("/etc/os-release", []byte("ID=talos\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	return tr
}

func TestSquashfsIsReproducible(t *testing.T) {
	needTool(t, "mksquashfs", "squashfs-tools")

	ctx := context.Background()
	dir := t.TempDir()

	a, b := filepath.Join(dir, "a.sqsh"), filepath.Join(dir, "b.sqsh")

	if err := Squash(ctx, writeTree(t, []string{"init", "etcd", "lib.so"}, time.Unix(1e9, 0), 0o022), a, SquashfsOptions{}); err != nil {
		t.Fatal(err)
	}

	if err := Squash(ctx, writeTree(t, []string{"lib.so", "etcd", "init"}, time.Now(), 0o077), b, SquashfsOptions{}); err != nil {
		t.Fatal(err)
	}

	da, _ := os.ReadFile(a)
	db, _ := os.ReadFile(b)

	if len(da) == 0 || !bytes.Equal(da, db) {
		t.Fatalf("two builds of the same tree differ: %d and %d bytes", len(da), len(db))
	}

	needTool(t, "unsquashfs", "squashfs-tools")

	out, err := exec.Command("unsquashfs", "-lln", "-UTC", a).CombinedOutput()
	if err != nil {
		t.Fatalf("unsquashfs: %v\n%s", err, out)
	}

	// Owners are root, times are the epoch, modes are the tree's, whatever the umask was.
	entries := map[string]string{}

	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) >= 6 && strings.HasPrefix(f[5], "squashfs-root") {
			entries[strings.TrimPrefix(f[5], "squashfs-root")] = strings.Join([]string{f[0], f[1], f[3], f[4]}, " ")
		}
	}

	for p, want := range map[string]string{
		"/usr/sbin/init":  "-rwxr-xr-x 0/0 1970-01-01 00:00",
		"/tmp":            "drwxrwxrwt 0/0 1970-01-01 00:00",
		"/sbin":           "lrwxrwxrwx 0/0 1970-01-01 00:00",
		"/etc/os-release": "-rw-r--r-- 0/0 1970-01-01 00:00",
		"/root":           "drwx------ 0/0 1970-01-01 00:00",
	} {
		if entries[p] != want {
			t.Errorf("%s is %q, want %q", p, entries[p], want)
		}
	}
}

// TestLibrariesMatchLdd resolves the libraries of Debian's nft and iptables from their ELF
// headers and compares them with what ldd (the loader itself) finds.
func TestLibrariesMatchLdd(t *testing.T) {
	needTool(t, "ldd", "libc-bin")

	for _, prog := range []string{"/usr/sbin/nft", "/usr/sbin/xtables-nft-multi", "/usr/sbin/xtables-legacy-multi"} {
		if _, err := os.Stat(prog); err != nil {
			needTool(t, filepath.Base(prog), "iptables nftables")
		}

		out, err := exec.Command("ldd", prog).Output()
		if err != nil {
			t.Fatal(err)
		}

		want, err := parseLdd(string(out))
		if err != nil {
			t.Fatal(err)
		}

		got, err := sharedLibraries([]string{prog})
		if err != nil {
			t.Fatal(err)
		}

		slices.Sort(want)

		if strings.Join(got, " ") != strings.Join(want, " ") || len(got) < 3 {
			t.Errorf("%s: resolved %v, ldd says %v", prog, got, want)
		}
	}

	if _, err := parseLdd("\tlibgone.so.1 => not found\n"); err == nil || !strings.Contains(err.Error(), "libgone") {
		t.Fatalf("a missing library: got %v", err)
	}
}

func TestMergedUsr(t *testing.T) {
	for in, want := range map[string]string{
		"/lib/x86_64-linux-gnu/libc.so.6": "/usr/lib/x86_64-linux-gnu/libc.so.6",
		"/lib64/ld-linux-x86-64.so.2":     "/usr/lib64/ld-linux-x86-64.so.2",
		"/sbin/xtables-nft-multi":         "/usr/sbin/xtables-nft-multi",
		"/usr/sbin/nft":                   "/usr/sbin/nft",
		"/library":                        "/library",
	} {
		if got := mergedUsr(in); got != want {
			t.Errorf("mergedUsr(%s) = %s, want %s", in, got, want)
		}
	}
}

// TestUserlandRunsInChroot stages Debian's iptables, nftables and mkfs.xfs with their libraries
// into an otherwise empty root and runs them chrooted there: a missing library or plugin fails.
func TestUserlandRunsInChroot(t *testing.T) {
	needTool(t, "dpkg", "dpkg")

	for _, pkg := range append(DebianUserland.Packages, DiskUserland.Packages...) {
		if exec.Command("dpkg", "-s", pkg).Run() != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("Debian package %s is missing: .ci/run must install it", pkg)
			}

			t.Skipf("Debian package %s is missing", pkg)
		}
	}

	ctx := context.Background()
	tr := NewTree()

	if err := layout(tr); err != nil {
		t.Fatal(err)
	}

	programs, err := DebianUserland.Stage(ctx, tr)
	if err != nil {
		t.Fatal(err)
	}

	disk, err := DiskUserland.Stage(ctx, tr)
	if err != nil {
		t.Fatal(err)
	}

	programs = append(programs, disk...)

	for _, want := range []string{"/usr/sbin/nft", "/usr/sbin/xtables-nft-multi", "/usr/sbin/mkfs.xfs", "/usr/sbin/cryptsetup"} {
		if !tr.Has(want) || !strings.Contains(strings.Join(programs, " "), want) {
			t.Errorf("%s was not staged", want)
		}
	}

	for _, want := range []string{"/usr/lib64/ld-linux-x86-64.so.2", "/usr/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libnftables.so.1", "/usr/lib/x86_64-linux-gnu/xtables/libxt_conntrack.so", "/usr/lib/x86_64-linux-gnu/liburcu.so.8",
		// Loaded by glibc when cryptsetup's argon2 threads exit (no ELF header names it).
		"/usr/lib/x86_64-linux-gnu/libgcc_s.so.1"} {
		if !tr.Has(want) {
			t.Errorf("%s was not staged", want)
		}
	}

	root := filepath.Join(t.TempDir(), "root")
	if err = tr.WriteTo(root); err != nil {
		t.Fatal(err)
	}

	var log bytes.Buffer
	if err = runChecks(ctx, root, userlandChecks, &log); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}

	// Without the xtables plugins, a match cannot load: the check must see it.
	if err = os.RemoveAll(filepath.Join(root, "usr/lib/x86_64-linux-gnu/xtables")); err != nil {
		t.Fatal(err)
	}

	if err = runChecks(ctx, root, userlandChecks, &log); err == nil {
		t.Fatal("the chroot check passed without the xtables plugins")
	}
}

func TestToolsArePinned(t *testing.T) {
	names := map[string]bool{}

	for _, tool := range Tools() {
		if tool.Version == "" || !strings.HasPrefix(tool.Version, "v") || tool.Module == "" {
			t.Errorf("%s is not pinned: %+v", tool.Name, tool)
		}

		names[tool.Dest+"/"+tool.Name] = true
	}

	for _, want := range []string{"/usr/bin/containerd", "/usr/bin/containerd-shim-runc-v2", "/usr/bin/runc",
		"/opt/cni/bin/bridge", "/opt/cni/bin/host-local", "/opt/cni/bin/loopback", "/opt/cni/bin/portmap", "/opt/cni/bin/firewall", "/opt/cni/bin/bandwidth"} {
		if !names[want] {
			t.Errorf("the image lacks %s", want)
		}
	}

	a, b := Tools()[0], Tools()[0]
	b.Tags = append(b.Tags, "other")

	ka, _ := a.key()
	kb, _ := b.key()

	if ka == kb {
		t.Error("a change of build tags keeps the cached build")
	}
}

// parseLdd reads ldd's output: "libx.so.1 => /lib/.../libx.so.1 (0x...)" and
// "/lib64/ld-linux-x86-64.so.2 (0x...)"; the vDSO has no file.
func parseLdd(out string) ([]string, error) {
	var libs []string

	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "linux-vdso") || strings.Contains(line, "statically linked") {
			continue
		}

		if strings.Contains(line, "not found") {
			return nil, fmt.Errorf("missing library: %s", line)
		}

		if _, after, ok := strings.Cut(line, "=> "); ok {
			line = after
		}

		lib, _, _ := strings.Cut(line, " (")
		if !path.IsAbs(lib) {
			return nil, fmt.Errorf("unexpected ldd line %q", line)
		}

		libs = append(libs, lib)
	}

	return libs, nil
}

// TestImageCarriesRootfs: the signed image holds the rootfs like its other files, so an
// altered rootfs is refused.
func TestImageCarriesRootfs(t *testing.T) {
	f := newFixture(t)

	sqsh := filepath.Join(f.dir, "rootfs.sqsh")
	if err := os.WriteFile(sqsh, []byte("hsqs rootfs"), 0o644); err != nil {
		t.Fatal(err)
	}

	f.files[RootfsName] = sqsh
	img := f.build(t, true)

	m, err := Verify(bytes.NewReader(img), []ed25519.PublicKey{f.pub})
	if err != nil {
		t.Fatal(err)
	}

	if _, ok := m.file(RootfsName); !ok {
		t.Fatalf("manifest lacks %s: %+v", RootfsName, m.Files)
	}

	path := filepath.Join(f.dir, "img")
	if err = os.WriteFile(path, img, 0o644); err != nil {
		t.Fatal(err)
	}

	dest := filepath.Join(f.dir, "slot")
	if _, err = Extract(path, []ed25519.PublicKey{f.pub}, dest); err != nil {
		t.Fatal(err)
	}

	if got, _ := os.ReadFile(filepath.Join(dest, RootfsName)); string(got) != "hsqs rootfs" {
		t.Fatalf("extracted rootfs %q", got)
	}

	// Same size, other bytes: the manifest's digest catches it.
	if err = os.WriteFile(filepath.Join(dest, RootfsName), []byte("hsqs rootfX"), 0o644); err != nil {
		t.Fatal(err)
	}

	if _, err = VerifyDir(dest, []ed25519.PublicKey{f.pub}); !errors.Is(err, ErrRefused) {
		t.Fatalf("an altered rootfs in a slot: got %v", err)
	}
}
