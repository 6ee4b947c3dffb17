package container

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestParseMount(t *testing.T) {
	dir := t.TempDir()

	for _, c := range []struct {
		in   string
		want Mount
	}{
		{"type=bind,source=" + dir + ",target=/var/mnt/data", Mount{Type: "bind", Source: dir, Target: "/var/mnt/data"}},
		{"src=" + dir + ",dst=/var/mnt/ro/,readonly", Mount{Type: "bind", Source: dir, Target: "/var/mnt/ro", ReadOnly: true}},
		{"type=tmpfs,destination=/var/scratch,ro=false", Mount{Type: "tmpfs", Target: "/var/scratch"}},
	} {
		got, err := ParseMount(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseMount(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}

	for _, c := range []struct{ in, says string }{
		{"type=volume,source=x,target=/var/x", "use bind or tmpfs"},
		{"type=bind,source=" + dir + ",target=var/x", "target must be an absolute path"},
		{"type=bind,source=rel,target=/var/x", "source must be an absolute path"},
		{"type=bind,source=" + dir + "/missing,target=/var/x", "no such file"},
		{"type=tmpfs,source=" + dir + ",target=/var/x", "a tmpfs has no source"},
		{"type=bind,source=" + dir + ",target=/var/x,volume-opt=1", `unknown field "volume-opt"`},
	} {
		if _, err := ParseMount(c.in); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("ParseMount(%q): %v, want an error saying %q", c.in, err, c.says)
		}
	}
}

// mountUser binds a host folder read-only and mounts a tmpfs into a node's root, making the
// mount points; a read-only bind refuses writes.
func TestMountUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts")
	}

	src, root := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "marker"), []byte("from the host"), 0o600); err != nil {
		t.Fatal(err)
	}

	mounts := []Mount{{Type: "bind", Source: src, Target: "/var/mnt/host", ReadOnly: true}, {Type: "tmpfs", Target: "/var/scratch"}}

	t.Cleanup(func() {
		for _, m := range mounts {
			unix.Unmount(filepath.Join(root, m.Target), unix.MNT_DETACH)
		}
	})

	if err := mountUser(mounts, root); err != nil {
		t.Fatal(err)
	}

	if b, err := os.ReadFile(filepath.Join(root, "var/mnt/host/marker")); err != nil || string(b) != "from the host" {
		t.Errorf("the bound folder: %q, %v", b, err)
	}

	if err := os.WriteFile(filepath.Join(root, "var/mnt/host/new"), nil, 0o600); !errors.Is(err, unix.EROFS) {
		t.Errorf("a write to the read-only bind: %v, want EROFS", err)
	}

	var st unix.Statfs_t
	if err := unix.Statfs(filepath.Join(root, "var/scratch"), &st); err != nil || st.Type != unix.TMPFS_MAGIC {
		t.Errorf("/var/scratch is not a tmpfs: type %x, %v", st.Type, err)
	}
}

// disableIPv6 turns IPv6 off in the caller's network namespace: here a new one, on a thread
// of its own that is never given back.
func TestDisableIPv6(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: a network namespace")
	}

	errc := make(chan error, 1)

	go func() {
		runtime.LockOSThread() // not unlocked: the thread ends with its namespace

		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- err

			return
		}

		if err := disableIPv6(); err != nil {
			errc <- err

			return
		}

		for _, scope := range []string{"all", "default", "lo"} {
			// /proc/sys/net is the namespace of the thread that opens it.
			b, err := os.ReadFile("/proc/sys/net/ipv6/conf/" + scope + "/disable_ipv6")

			if err != nil || strings.TrimSpace(string(b)) != "1" {
				errc <- fmt.Errorf("%s: disable_ipv6 %q, %w", scope, b, err)

				return
			}
		}

		errc <- nil
	}()

	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}
