// Package sandbox confines a child process's filesystem access with Landlock, so a service
// such as apid or trustd can read its own folder and the system's libraries, and nothing else
// of the node (not the machine config, not the other services' keys), whatever user it runs as.
//
// Landlock restricts the calling thread and what it starts, so the child is started from a
// goroutine locked to an OS thread that is restricted first and thrown away afterwards:
// machined itself stays unconfined.
package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Policy lists what the confined process may reach; everything else of the filesystem is
// denied. Paths that do not exist are skipped.
type Policy struct {
	ReadOnly  []string // read files and list folders beneath
	ReadWrite []string // full access beneath
	Exec      []string // read and execute (the binary, the dynamic loader's libraries)
}

// System is the read-only part of the filesystem every Go service needs: libraries and the
// dynamic loader, certificates and resolver configuration, and the kernel's views.
var System = Policy{
	ReadOnly:  []string{"/etc", "/proc", "/sys", "/dev"},
	ReadWrite: []string{"/dev/null"},
	Exec:      []string{"/lib", "/lib64", "/usr/lib", "/usr/lib64"},
}

// Merge returns a new policy with the entries of p and of others (p itself, often the shared
// System, is left as it is).
func (p Policy) Merge(others ...Policy) Policy {
	out := Policy{ReadOnly: slices.Clone(p.ReadOnly), ReadWrite: slices.Clone(p.ReadWrite), Exec: slices.Clone(p.Exec)}

	for _, o := range others {
		out.ReadOnly = append(out.ReadOnly, o.ReadOnly...)
		out.ReadWrite = append(out.ReadWrite, o.ReadWrite...)
		out.Exec = append(out.Exec, o.Exec...)
	}

	return out
}

// Filesystem rights by Landlock ABI version.
const (
	rightsV1 = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_READ_FILE |
		unix.LANDLOCK_ACCESS_FS_READ_DIR | unix.LANDLOCK_ACCESS_FS_REMOVE_DIR | unix.LANDLOCK_ACCESS_FS_REMOVE_FILE |
		unix.LANDLOCK_ACCESS_FS_MAKE_CHAR | unix.LANDLOCK_ACCESS_FS_MAKE_DIR | unix.LANDLOCK_ACCESS_FS_MAKE_REG |
		unix.LANDLOCK_ACCESS_FS_MAKE_SOCK | unix.LANDLOCK_ACCESS_FS_MAKE_FIFO | unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK |
		unix.LANDLOCK_ACCESS_FS_MAKE_SYM
	rightsV2 = rightsV1 | unix.LANDLOCK_ACCESS_FS_REFER
	rightsV3 = rightsV2 | unix.LANDLOCK_ACCESS_FS_TRUNCATE
	rightsV5 = rightsV3 | unix.LANDLOCK_ACCESS_FS_IOCTL_DEV

	// Rights that apply to a file (rather than a folder) rule.
	fileRights = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_READ_FILE |
		unix.LANDLOCK_ACCESS_FS_TRUNCATE | unix.LANDLOCK_ACCESS_FS_IOCTL_DEV

	readRights = unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_READ_DIR
	execRights = readRights | unix.LANDLOCK_ACCESS_FS_EXECUTE
)

// ErrUnsupported means the kernel has no Landlock (too old, or not enabled at boot).
var ErrUnsupported = errors.New("landlock is not available in this kernel")

// ABI returns the kernel's Landlock ABI version, 0 when it has none.
func ABI() int {
	v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 {
		return 0
	}

	return int(v)
}

func handledRights(abi int) uint64 {
	switch {
	case abi >= 5:
		return rightsV5
	case abi >= 3:
		return rightsV3
	case abi == 2:
		return rightsV2
	default:
		return rightsV1
	}
}

// Start starts cmd confined by p and returns a channel that receives cmd.Wait's result. The
// forking thread stays with the child until it exits: Pdeathsig is tied to that thread.
// Without Landlock it returns ErrUnsupported and starts nothing.
func Start(cmd *exec.Cmd, p Policy) (<-chan error, error) {
	return StartOnThread(cmd, func() error { return RestrictThread(p) })
}

// StartOnThread starts cmd from a goroutine locked to a fresh OS thread that prepare sets up
// first (the child inherits the thread's confinement and scheduling settings), and returns
// the channel that receives cmd.Wait's result. The thread stays with the child until it
// exits (Pdeathsig is tied to it) and is thrown away afterwards.
func StartOnThread(cmd *exec.Cmd, prepare func() error) (<-chan error, error) {
	started := make(chan error, 1)
	exited := make(chan error, 1)

	go func() {
		// Never unlocked: when this goroutine returns, the prepared thread ends with it.
		runtime.LockOSThread()

		if err := prepare(); err != nil {
			started <- err

			return
		}

		if err := cmd.Start(); err != nil {
			started <- err

			return
		}

		started <- nil

		exited <- cmd.Wait()
	}()

	if err := <-started; err != nil {
		return nil, err
	}

	return exited, nil
}

// RestrictThread confines the calling OS thread, which must be locked, and what it starts to
// p. Without Landlock it returns ErrUnsupported.
func RestrictThread(p Policy) error {
	abi := ABI()
	if abi == 0 {
		return ErrUnsupported
	}

	return restrictThread(p, abi)
}

// restrictThread confines the calling OS thread (and what it starts) to p.
func restrictThread(p Policy, abi int) error {
	handled := handledRights(abi)
	attr := unix.LandlockRulesetAttr{Access_fs: handled}

	fd, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr), 0)
	if errno != 0 {
		return fmt.Errorf("creating Landlock ruleset: %w", errno)
	}
	defer unix.Close(int(fd))

	for _, set := range []struct {
		paths  []string
		rights uint64
	}{
		{p.ReadOnly, readRights},
		{p.Exec, execRights},
		{p.ReadWrite, handled},
	} {
		for _, path := range set.paths {
			if err := addRule(int(fd), path, set.rights&handled); err != nil {
				return err
			}
		}
	}

	// Landlock needs no_new_privs to be set by an unprivileged caller; the child inherits it
	// (it gains nothing from setuid binaries, which a service has no use for).
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("setting no_new_privs: %w", err)
	}

	if _, _, errno := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, fd, 0, 0); errno != 0 {
		return fmt.Errorf("applying Landlock ruleset: %w", errno)
	}

	return nil
}

func addRule(rulesetFD int, path string, rights uint64) error {
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}

	if err != nil {
		return fmt.Errorf("sandbox path %s: %w", path, err)
	}

	if !fi.IsDir() {
		rights &= fileRights
	}

	fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening sandbox path %s: %w", path, err)
	}
	defer unix.Close(fd)

	rule := unix.LandlockPathBeneathAttr{Allowed_access: rights, Parent_fd: int32(fd)}

	if _, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(rulesetFD), unix.LANDLOCK_RULE_PATH_BENEATH,
		uintptr(unsafe.Pointer(&rule)), 0, 0, 0); errno != 0 {
		return fmt.Errorf("allowing %s in the sandbox: %w", path, errno)
	}

	return nil
}
