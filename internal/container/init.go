package container

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"golang.org/x/sys/unix"

	networkctrl "github.com/talos-go/talos/internal/machined/controllers/network"
)

// Files of the node's root that Init writes on each boot.
const (
	// NodeConfig is the first-boot machine config, copied into the node's /run.
	NodeConfig = "/run/machined/config.yaml"
	// EnvNode is in a container node's environment, as it always was; machined no longer reads
	// it (runtime.DetectMode decides the node's kind from --platform and --state).
	EnvNode = "TALOS_CONTAINER"
	// Init is the image's init: the multi-call binary.
	initPath = "/sbin/init"
)

// InitMain is `machined container-init SPEC`: PID 1 of a new node, before the image runs.
func InitMain(args []string) error {
	if len(args) != 1 {
		return errors.New("usage: container-init SPEC (started by `machined container`, not by hand)")
	}

	var spec Spec
	if err := json.Unmarshal([]byte(args[0]), &spec); err != nil {
		return fmt.Errorf("spec: %w", err)
	}

	// Namespaces and the root are a thread's: everything below, and the exec, on this one.
	runtime.LockOSThread()

	// Wait for the launcher: cgroup and network first.
	goPipe := os.NewFile(3, "go")
	if _, err := goPipe.Read(make([]byte, 1)); err != nil {
		return fmt.Errorf("waiting for the launcher: %w", err)
	}

	goPipe.Close()

	if spec.DisableIPv6 {
		if err := disableIPv6(); err != nil {
			return err
		}
	}

	if spec.Cgroup != "" {
		// The cgroup the launcher moved us into becomes the node's cgroup root.
		if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
			return fmt.Errorf("cgroup namespace: %w", err)
		}
	}

	if err := buildRoot(spec); err != nil {
		return err
	}

	if err := unix.Sethostname([]byte(spec.Hostname)); err != nil {
		return fmt.Errorf("setting hostname: %w", err)
	}

	return ExecInit("container", spec.Address.Addr(), spec.Config != "", EnvNode+"=1")
}

// mnt is one mount of the node's root; target is inside the new root.
type mnt struct {
	source, target, fstype string
	flags                  uintptr
	data                   string
}

// OverlayFolders are the image's folders that are writable on a running node.
var OverlayFolders = []string{"/etc/cni", "/etc/kubernetes", "/usr/libexec/kubernetes", "/opt"}

// buildRoot mounts the node's root at spec.rootDir() and makes it the root of this namespace.
func buildRoot(spec Spec) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making mounts private: %w", err)
	}

	root := spec.rootDir()

	if err := MountImage(spec.Image, root); err != nil {
		return err
	}

	if err := mountLayers(spec, root, false); err != nil {
		return err
	}

	if err := mountUser(spec.Mounts, root); err != nil {
		return err
	}

	return pivot(root)
}

// mountLayers mounts the node's layers over its image at root: tmpfs for /dev /proc /run /sys
// /tmp /system, the overlay /var on EPHEMERAL, and the partitions under /system. On metal, /dev
// is the kernel's devtmpfs and the cgroups are the kernel's own cgroup2.
func mountLayers(spec Spec, root string, metal bool) error {
	eph := filepath.Join(spec.Disk, "EPHEMERAL")

	var err error

	for _, d := range []string{"upper", "work", "containerd"} {
		if err = os.MkdirAll(filepath.Join(eph, d), 0o755); err != nil {
			return err
		}
	}

	const nosuid = unix.MS_NOSUID | unix.MS_NODEV

	dev := mnt{"tmpfs", "/dev", "tmpfs", unix.MS_NOSUID, "mode=755,size=65536k"}
	if metal {
		dev = mnt{"devtmpfs", "/dev", "devtmpfs", unix.MS_NOSUID, "mode=755"}
	}

	mounts := []mnt{
		dev,
		{"devpts", "/dev/pts", "devpts", unix.MS_NOSUID | unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=620"},
		{"shm", "/dev/shm", "tmpfs", nosuid | unix.MS_NOEXEC, "mode=1777,size=65536k"},
		{"proc", "/proc", "proc", nosuid | unix.MS_NOEXEC, ""},
		// Writable, as in upstream's privileged node container: the sysfs of a network namespace
		// is one superblock, and a read-only one makes every privileged container's sysfs mount
		// (kubelet, kube-proxy, flannel) fail with EBUSY.
		{"sysfs", "/sys", "sysfs", nosuid | unix.MS_NOEXEC, ""},
		{"tmpfs", "/run", "tmpfs", nosuid, "mode=755"},
		{"tmpfs", "/tmp", "tmpfs", nosuid, "mode=1777"},
		{"tmpfs", "/system", "tmpfs", nosuid, "mode=755"},
		{"overlay", "/var", "overlay", 0, fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", filepath.Join(root, "var"), filepath.Join(eph, "upper"), filepath.Join(eph, "work"))},
	}

	// containerd's overlayfs snapshots cannot have their upper layers on the overlay /var: its
	// folder is the EPHEMERAL folder itself, as /var is a real filesystem on upstream's nodes.
	mounts = append(mounts, mnt{filepath.Join(eph, "containerd"), "/var/lib/containerd", "", unix.MS_BIND, ""})

	// Folders of the read-only image that Kubernetes writes to: overlays with their upper layers
	// on EPHEMERAL, as upstream's nodes mount them (under /var/system/overlays).
	for _, dir := range OverlayFolders {
		name := strings.ReplaceAll(strings.Trim(dir, "/"), "/", "-")
		upper, work := filepath.Join(eph, "system", "overlays", name+"-diff"), filepath.Join(eph, "system", "overlays", name+"-workdir")

		for _, d := range []string{upper, work} {
			if err = os.MkdirAll(d, 0o755); err != nil {
				return err
			}
		}

		mounts = append(mounts, mnt{"overlay", dir, "overlay", 0, fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", filepath.Join(root, dir), upper, work)})
	}

	// The node's partitions, as the process mode keeps them, under /system.
	for _, p := range []string{"STATE", "META", "BOOT"} {
		mounts = append(mounts, mnt{filepath.Join(spec.Disk, p), "/system/" + partitionDir(p), "", unix.MS_BIND, ""})
	}

	for _, m := range mounts {
		target := filepath.Join(root, m.target)

		if err = mountPoint(m, target); err != nil {
			return fmt.Errorf("mount point %s: %w", m.target, err)
		}

		if err = unix.Mount(m.source, target, m.fstype, m.flags, m.data); err != nil {
			return fmt.Errorf("mounting %s on %s: %w", m.fstype+m.source, m.target, err)
		}
	}

	switch {
	case metal:
		if err = unix.Mount("cgroup2", filepath.Join(root, "sys", "fs", "cgroup"), "cgroup2", nosuid|unix.MS_NOEXEC, ""); err != nil {
			return fmt.Errorf("mounting cgroup2 on /sys/fs/cgroup: %w", err)
		}
	case spec.Cgroup != "":
		if err = mountCgroups(filepath.Join(root, "sys", "fs", "cgroup")); err != nil {
			return err
		}
	}

	if err = makeDevices(root, !metal); err != nil {
		return err
	}

	return writeEtc(root, spec)
}

// mountCgroups mounts the node's cgroups at target (its /sys/fs/cgroup), writable for containerd,
// runc and kubelet, as upstream's docker mode: cgroup2 when the host is unified, else a tmpfs with
// each v1 hierarchy this process is in. The node's cgroup namespace makes its own cgroup their root.
func mountCgroups(target string) error {
	const flags = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC

	var st unix.Statfs_t
	if err := unix.Statfs("/sys/fs/cgroup", &st); err != nil {
		return fmt.Errorf("the host has no /sys/fs/cgroup: %w", err)
	}

	if st.Type == unix.CGROUP2_SUPER_MAGIC {
		if err := unix.Mount("cgroup2", target, "cgroup2", flags, ""); err != nil {
			return fmt.Errorf("mounting cgroup2 on /sys/fs/cgroup: %w", err)
		}

		return nil
	}

	if err := unix.Mount("cgroup", target, "tmpfs", flags, "mode=755"); err != nil {
		return fmt.Errorf("mounting a tmpfs on /sys/fs/cgroup: %w", err)
	}

	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return err
	}

	for line := range strings.Lines(string(own)) {
		// hierarchy-ID:controllers:path; the unified hierarchy (empty controllers) is left out.
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 || parts[1] == "" {
			continue
		}

		name := strings.TrimPrefix(parts[1], "name=")
		dir := filepath.Join(target, name)

		if err = os.MkdirAll(dir, 0o755); err != nil {
			return err
		}

		if err = unix.Mount("cgroup", dir, "cgroup", flags, parts[1]); err != nil {
			return fmt.Errorf("mounting cgroup %s: %w", parts[1], err)
		}

		// cpu,cpuacct is also found as cpu and cpuacct.
		if ctrls := strings.Split(name, ","); len(ctrls) > 1 {
			for _, c := range ctrls {
				if err = os.Symlink(name, filepath.Join(target, c)); err != nil {
					return err
				}
			}
		}
	}

	return nil
}

// MountImage mounts the node image read-only at root. A shared loop device can be released
// between finding and mounting it (its last node stopped): then the mount is tried once more.
func MountImage(image, root string) error {
	var err error

	for range 2 {
		var loop *os.File

		if loop, err = attachLoop(image); err != nil {
			return err
		}

		err = unix.Mount(loop.Name(), root, "squashfs", unix.MS_RDONLY|unix.MS_NODEV, "")
		loop.Close()

		if err == nil {
			return nil
		}
	}

	return fmt.Errorf("mounting node image %s: %w", image, err)
}

// partitionDir is where a partition folder is mounted under /system.
func partitionDir(label string) string {
	switch label {
	case "STATE":
		return "state"
	case "META":
		return "meta"
	default:
		return "boot"
	}
}

// makeDevices fills the /dev tmpfs with the character devices a node's programs use (nodes:
// false on metal, whose devtmpfs has them) and the links every /dev has.
func makeDevices(root string, nodes bool) error {
	devices := []struct {
		name         string
		major, minor uint32
		mode         uint32
	}{
		{"null", 1, 3, 0o666}, {"zero", 1, 5, 0o666}, {"full", 1, 7, 0o666}, {"random", 1, 8, 0o666}, {"urandom", 1, 9, 0o666}, {"tty", 5, 0, 0o666},
		// The kernel log: kubelet's OOM watcher reads it (the node shares the host's kernel).
		{"kmsg", 1, 11, 0o644},
	}
	if !nodes {
		devices = nil
	}

	for _, d := range devices {
		if err := unix.Mknod(filepath.Join(root, "dev", d.name), unix.S_IFCHR|d.mode, int(unix.Mkdev(d.major, d.minor))); err != nil {
			return fmt.Errorf("creating /dev/%s: %w", d.name, err)
		}
	}

	for link, target := range map[string]string{"ptmx": "pts/ptmx", "fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"} {
		if err := os.Symlink(target, filepath.Join(root, "dev", link)); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
	}

	return nil
}

// writeEtc writes /system/etc/{hosts,resolv.conf,hostname} and binds them over the image's
// /etc files, as upstream does: the image stays read-only, the node's own names are in /system.
func writeEtc(root string, spec Spec) error {
	etc := filepath.Join(root, "system", "etc")
	if err := os.MkdirAll(etc, 0o755); err != nil {
		return err
	}

	var cfg []byte

	if spec.Config != "" {
		var err error
		if cfg, err = os.ReadFile(spec.Config); err != nil {
			return fmt.Errorf("reading the node's config: %w", err)
		}
	}

	files := map[string]string{
		"hosts":       hostsFile(spec.Address.Addr().String(), spec.Hostname),
		"resolv.conf": resolvConf(cfg),
		"hostname":    spec.Hostname + "\n",
	}

	for name, content := range files {
		src := filepath.Join(etc, name)
		if err := os.WriteFile(src, []byte(content), 0o644); err != nil {
			return err
		}

		dst := filepath.Join(root, "etc", name)
		if _, err := os.Stat(dst); err != nil {
			return fmt.Errorf("the node image has no /etc/%s to mount the node's over: rebuild it with `make rootfs`", name)
		}

		if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("mounting /system/etc/%s over /etc/%s: %w", name, name, err)
		}
	}

	if err := bindTrustBundle(root); err != nil {
		return err
	}

	if spec.Config == "" {
		return nil
	}

	dst := filepath.Join(root, NodeConfig)
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return err
	}

	return os.WriteFile(dst, cfg, 0o600)
}

// resolvConf is the boot-time resolv.conf: the node's resolvers, until machined's resolver
// controller takes over (and points it at the host DNS when that is enabled).
func resolvConf(cfg []byte) string {
	var c config.Config

	if len(cfg) > 0 {
		if p, err := configloader.NewFromBytes(cfg); err == nil {
			c = p
		}
	}

	var b strings.Builder

	for _, s := range networkctrl.Nameservers(c) {
		fmt.Fprintf(&b, "nameserver %s\n", s)
	}

	return b.String()
}

// pivot makes root the namespace's root and drops the host's: pivot_root with the old root
// stacked on the new one (no folder for it needed in a read-only image), then a lazy unmount.
func pivot(root string) error {
	if err := unix.Chdir(root); err != nil {
		return err
	}

	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}

	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("unmounting the host's root: %w", err)
	}

	// Shared inside the node (the host never sees it: the namespace's peer group is its own), so
	// kubelet's rshared binds propagate volume mounts to the pods, as on upstream's nodes.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SHARED, ""); err != nil {
		return fmt.Errorf("making the node's mounts shared: %w", err)
	}

	return unix.Chdir("/")
}

// BuildMetalRoot is buildRoot for a node on its own kernel (the initramfs's /init): the image
// at spec.Image, the layers over it with spec.Disk standing for the disk, then switch_root, as
// pivot_root cannot leave the initramfs.
func BuildMetalRoot(spec Spec) error {
	root := spec.rootDir()

	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}

	if err := MountImage(spec.Image, root); err != nil {
		return err
	}

	if err := mountLayers(spec, root, true); err != nil {
		return err
	}

	for _, b := range []struct{ src, target string }{{spec.Modules, "usr/lib/modules"}, {spec.Initramfs, InitramfsDir}, {spec.Init, initPath}} {
		if b.src == "" {
			continue
		}

		target := filepath.Join(root, b.target)
		if _, err := os.Stat(target); errors.Is(err, os.ErrNotExist) {
			err = mountPoint(mnt{source: b.src, flags: unix.MS_BIND}, target)
			if err != nil {
				return err
			}
		}

		if err := unix.Mount(b.src, target, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("binding %s at %s: %w", b.src, target, err)
		}

		if err := unix.Mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			return fmt.Errorf("making %s read-only: %w", target, err)
		}
	}

	if err := unix.Chdir(root); err != nil {
		return err
	}

	if err := unix.Mount(".", "/", "", unix.MS_MOVE, ""); err != nil {
		return fmt.Errorf("moving the node's root over the initramfs: %w", err)
	}

	if err := unix.Chroot("."); err != nil {
		return fmt.Errorf("chroot into the node's root: %w", err)
	}

	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SHARED, ""); err != nil {
		return fmt.Errorf("making the node's mounts shared: %w", err)
	}

	return unix.Chdir("/")
}

// mountPoint makes the folder a mount goes on, or an empty file for a bind of a file or a device
// (an installed metal node's META partition).
func mountPoint(m mnt, target string) error {
	if fi, err := os.Stat(m.source); err == nil && m.flags&unix.MS_BIND != 0 && !fi.IsDir() {
		if err = os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}

		return os.WriteFile(target, nil, 0o600)
	}

	return os.MkdirAll(target, 0o755)
}

// InitramfsDir is where a metal node sees its initramfs's files (Spec.Initramfs).
const InitramfsDir = "/system/initramfs"

// ExecInit runs the image's init as the node's machined: platform, the node's address and
// its first-boot config (empty: maintenance mode).
func ExecInit(platform string, address netip.Addr, config bool, env ...string) error {
	argv := []string{initPath, "--platform", platform, "--state", "/", "--address", address.String()}
	if config {
		argv = append(argv, "--config", NodeConfig)
	}

	env = append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root"}, env...)

	return fmt.Errorf("running the image's init: %w", syscall.Exec(initPath, argv, env))
}
