package server

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// hostPath maps a path of the node's filesystem to the path machined opens. A node with its
// own root (a container-mode node, metal) sees its paths as they are. A process-mode node's
// filesystem is its state folder (/var is EPHEMERAL, /system/state is STATE, and so on) plus
// the host's /proc and /sys, which it shares: the API only ever reads them.
func (s *Machine) hostPath(nodePath string) (string, error) {
	if !filepath.IsAbs(nodePath) {
		return "", status.Errorf(codes.InvalidArgument, "path %q must be absolute", nodePath)
	}

	clean := filepath.Clean(nodePath)
	p := s.R.Paths

	// Without a kernel of its own the node keeps its own boot ID, new at every start.
	if !s.R.Mode.OwnKernel() && clean == "/proc/sys/kernel/random/boot_id" {
		return p.BootIDFile(), nil
	}

	if !s.R.Mode.SharesHost() {
		return clean, nil
	}

	if under(clean, "/proc") || under(clean, "/sys") {
		return clean, nil
	}

	mounts := []struct{ node, host string }{
		{"/system/state", p.State()},
		{"/system", p.System()},
		{"/var", p.Ephemeral()},
		{"/boot", p.Boot()},
		{"/meta", p.Meta()},
	}

	for _, m := range mounts {
		if under(clean, m.node) {
			return filepath.Join(m.host, strings.TrimPrefix(clean, m.node)), nil
		}
	}

	if clean == "/" {
		return p.Root, nil
	}

	return "", status.Errorf(codes.NotFound, "%s: not on this node; a process-mode node holds /var, /system, /boot and /meta, and the host's /proc and /sys", nodePath)
}

// walkRoot is where a walk of hostRoot starts: a symlink into a kernel filesystem
// (/proc/self, /sys/class/net/lo) is followed, as ls and cp -r of such a path do; any other
// symlink is listed as itself, so no walk leaves the node's folders.
func walkRoot(hostRoot string) string {
	fi, err := os.Lstat(hostRoot)
	if err != nil || fi.Mode()&os.ModeSymlink == 0 {
		return hostRoot
	}

	target, err := filepath.EvalSymlinks(hostRoot)
	if err != nil || !pseudoFS(target) {
		return hostRoot
	}

	return target
}

func under(path, dir string) bool { return path == dir || strings.HasPrefix(path, dir+"/") }

// pseudoFS reports whether path is on a kernel filesystem whose files report a size that is
// not their content's (0 in /proc and cgroupfs, 4096 in /sys).
func pseudoFS(path string) bool {
	var st unix.Statfs_t
	if unix.Statfs(path, &st) != nil {
		return false
	}

	switch st.Type {
	case unix.PROC_SUPER_MAGIC, unix.SYSFS_MAGIC, unix.CGROUP_SUPER_MAGIC, unix.CGROUP2_SUPER_MAGIC,
		unix.DEBUGFS_MAGIC, unix.TRACEFS_MAGIC, unix.SECURITYFS_MAGIC, unix.BPF_FS_MAGIC:
		return true
	}

	return false
}

// maxPseudoFile bounds what one kernel file contributes to an archive: the content is read
// whole to learn its size, and a few (/proc/kcore) are endless.
const maxPseudoFile = 4 << 20

// readPseudo reads a kernel file for an archive. It opens without blocking (/proc/kmsg and
// trace pipes would wait forever for news) and reports nil content, not an error, for what
// cannot be read now: such entries are archived empty, as upstream's archiver does.
func readPseudo(path string) []byte {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil
	}
	defer f.Close()

	var buf bytes.Buffer

	if _, err = io.Copy(&buf, io.LimitReader(f, maxPseudoFile+1)); err != nil || buf.Len() > maxPseudoFile {
		return nil
	}

	return buf.Bytes()
}

// skippable reports whether an archive walk may step over err in a kernel filesystem: a
// process that ended, an entry only root (or nobody) may read.
func skippable(err error) bool {
	return errors.Is(err, os.ErrNotExist) || errors.Is(err, os.ErrPermission) ||
		errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EIO) || errors.Is(err, unix.EAGAIN)
}
