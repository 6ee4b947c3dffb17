// Package container runs a node as upstream's docker provisioner does, without Docker: machined
// is PID 1 in its own pid, mount, network, uts, ipc and cgroup namespaces, with the node image
// (a squashfs) as its root.
//
// Three steps, three places:
//   - Launch (`machined container`, on the host) makes the namespaces, puts the node in its
//     cgroup, gives it a veth on the cluster's bridge, and starts it again after a reboot.
//   - Init (`machined container-init`, PID 1 in the new namespaces, before the image runs)
//     builds the root: the squashfs base read-only, tmpfs for /dev /run /tmp /system, proc and
//     sysfs of the node's own namespaces, an overlay /var on the node's EPHEMERAL folder, the
//     node's STATE, META and BOOT folders under /system; then it pivots into it and runs the
//     image's /sbin/init.
//   - In machined (node.go): how a node in a container reboots.
package container

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"syscall"
	"time"
)

// Spec is one node: what the launcher needs and what it hands to Init.
type Spec struct {
	Image    string       `json:"image"`    // the node image (squashfs)
	Disk     string       `json:"disk"`     // the node's folder on the host: STATE, META, BOOT, EPHEMERAL
	Hostname string       `json:"hostname"` // set in the node's uts namespace
	Address  netip.Prefix `json:"address"`  // the node's address on the cluster network
	Config   string       `json:"config"`   // machine config for the first boot, copied into the node
	Cgroup   string       `json:"cgroup"`   // cgroup name (cluster/node); empty: none
	Limits   Limits       `json:"limits"`
	Network  NodeNetwork  `json:"network"`
	// Modules (metal) is the kernel's modules folder, bound read-only at /usr/lib/modules in the
	// node's root: machined loads what the config asks for (bonding, 8021q, bridge) from it.
	Modules string `json:"modules,omitempty"`
	// Initramfs (metal) is the initramfs's root, bound read-only at /system/initramfs in the
	// node's root: the files an install writes to disk (kernel, GRUB, this initramfs again).
	Initramfs string `json:"initramfs,omitempty"`
	// Init (metal) is the node image's machined as the initramfs carries it (imager takes it
	// from the image): bound over the image's, so the node runs the copy the kernel holds in
	// memory already. An emulated machine would otherwise read the binary from the squashfs
	// and translate its code a second time (2 s of a TCG boot).
	Init string `json:"init,omitempty"`
	// Mounts are the host's folders (or tmpfs) mounted into the node's root (--mount).
	Mounts []Mount `json:"mounts,omitempty"`
	// DisableIPv6 turns IPv6 off in the node's network namespace (--docker-disable-ipv6).
	DisableIPv6 bool `json:"disableIPv6,omitempty"`
}

func (s *Spec) check() error {
	switch {
	case s.Image == "":
		return errors.New("--spec: image is empty: give the node image (build it with `make rootfs`)")
	case s.Disk == "" || !filepath.IsAbs(s.Disk):
		return fmt.Errorf("--spec: disk %q must be an absolute folder", s.Disk)
	case !s.Address.IsValid():
		return errors.New("--spec: address is not a prefix like 10.5.0.2/24")
	}

	if _, err := os.Stat(s.Image); err != nil {
		return fmt.Errorf("node image: %w", err)
	}

	return nil
}

// rootDir is the mount point of the node's root, in its folder on the host; it stays empty on
// the host since everything is mounted in the node's own mount namespace.
func (s *Spec) rootDir() string { return filepath.Join(s.Disk, "rootfs") }

// Main is `machined container --spec JSON`: it runs the node until it shuts down; a reboot
// starts it again in new namespaces.
func Main(args []string) error {
	fs := flag.NewFlagSet("container", flag.ContinueOnError)
	specJSON := fs.String("spec", "", "the node, as JSON (written by talosctl cluster create)")

	if err := fs.Parse(args); err != nil {
		return err
	}

	var spec Spec
	if err := json.Unmarshal([]byte(*specJSON), &spec); err != nil {
		return fmt.Errorf("--spec: %w", err)
	}

	if err := spec.check(); err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	return Launch(ctx, spec)
}

// Launch runs the node until it powers off or ctx ends (the node is then asked to shut down).
func Launch(ctx context.Context, spec Spec) error {
	for _, d := range []string{spec.rootDir(), filepath.Join(spec.Disk, "STATE"), filepath.Join(spec.Disk, "META"), filepath.Join(spec.Disk, "BOOT"), filepath.Join(spec.Disk, "EPHEMERAL")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}

	var cg *Cgroup

	if spec.Cgroup != "" {
		var err error
		if cg, err = NewCgroup(spec.Cgroup, spec.Limits); err != nil {
			return err
		}
	}

	// Pdeathsig follows the thread that started the node: keep to one.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	for {
		// A reset inside the node asked for its partitions to be wiped before it starts again.
		if err := applyWipe(&spec); err != nil {
			return err
		}

		reboot, err := runOnce(ctx, spec, cg)
		if err != nil || !reboot || ctx.Err() != nil {
			return err
		}

		fmt.Fprintf(os.Stderr, "container: node rebooted, starting it again\n")
	}
}

// runOnce starts the node in new namespaces and waits for it; it reports whether it rebooted.
func runOnce(ctx context.Context, spec Spec, cg *Cgroup) (bool, error) {
	specJSON, err := json.Marshal(spec)
	if err != nil {
		return false, err
	}

	goRead, goWrite, err := os.Pipe()
	if err != nil {
		return false, err
	}
	defer goWrite.Close()

	cmd := exec.Command("/proc/self/exe", "container-init", string(specJSON))
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.ExtraFiles = []*os.File{goRead}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS | syscall.CLONE_NEWNET | syscall.CLONE_NEWUTS | syscall.CLONE_NEWIPC,
		Pdeathsig:  syscall.SIGKILL, // the node does not outlive its launcher
	}

	err = cmd.Start()
	goRead.Close()

	if err != nil {
		return false, fmt.Errorf("starting the node: %w", err)
	}

	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	// The node waits on the pipe until it is in its cgroup (it makes its cgroup namespace there)
	// and has its network.
	if err = prepare(cmd.Process.Pid, spec, cg); err != nil {
		cmd.Process.Kill()
		_ = <-exited // killed: its status is not news

		return false, err
	}

	if _, err = goWrite.Write([]byte{1}); err != nil {
		return false, fmt.Errorf("starting the node: %w", err)
	}

	select {
	case err = <-exited:
	case <-ctx.Done():
		// machined shuts down on SIGTERM; a node that hangs is killed with its namespace.
		cmd.Process.Signal(syscall.SIGTERM)

		// A stop we asked for: the exit status is not news.
		select {
		case _ = <-exited:
		case <-time.After(time.Minute):
			cmd.Process.Kill()
			_ = <-exited
		}

		return false, nil
	}

	// reboot(2) by the init of a pid namespace ends it with SIGHUP (restart) or SIGINT
	// (power off, halt): that is how a container's init reboots.
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			switch ws.Signal() {
			case syscall.SIGHUP:
				return true, nil
			case syscall.SIGINT:
				return false, nil
			}
		}
	}

	if err != nil {
		return false, fmt.Errorf("node: %w", err)
	}

	return false, nil
}

func prepare(pid int, spec Spec, cg *Cgroup) error {
	if cg != nil {
		if err := cg.Add(pid); err != nil {
			return err
		}
	}

	if spec.Network.Bridge != "" {
		nn := spec.Network
		nn.Address = spec.Address

		if err := nn.Attach(pid); err != nil {
			return fmt.Errorf("node network: %w", err)
		}
	}

	return nil
}
