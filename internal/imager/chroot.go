package imager

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// chrootCheck is one program run inside the staged rootfs and a string its output must hold.
type chrootCheck struct {
	argv []string
	env  []string
	want string
}

// userlandChecks run the dynamic userland with only the image's files: its loader, libraries
// and the xtables plugins it loads with dlopen.
var userlandChecks = []chrootCheck{
	{argv: []string{"/usr/sbin/iptables", "--version"}, want: "nf_tables"},
	{argv: []string{"/usr/sbin/ip6tables", "--version"}, want: "nf_tables"},
	{argv: []string{"/usr/sbin/iptables-legacy", "--version"}, want: "legacy"},
	{argv: []string{"/usr/sbin/iptables-nft-save", "--version"}, want: "nf_tables"},
	// -h with a match loads its plugin from /usr/lib/x86_64-linux-gnu/xtables.
	{argv: []string{"/usr/sbin/iptables", "-m", "conntrack", "-h"}, want: "ctstate"},
	{argv: []string{"/usr/sbin/iptables", "-j", "MASQUERADE", "-h"}, want: "to-ports"},
	{argv: []string{"/usr/sbin/nft", "--version"}, want: "nftables"},
	{argv: []string{"/usr/sbin/ebtables", "--version"}, want: "nf_tables"},
	{argv: []string{"/usr/sbin/mkfs.xfs", "-V"}, want: "mkfs.xfs version"},
	{argv: []string{"/usr/sbin/mkfs.fat", "--help"}, want: "Create FAT filesystem"},
	{argv: []string{"/usr/sbin/cryptsetup", "--version"}, want: "cryptsetup 2."},
}

// toolChecks run the static tools and the node binaries.
var toolChecks = []chrootCheck{
	{argv: []string{"/usr/bin/containerd", "--version"}, want: containerdVer},
	{argv: []string{"/usr/bin/containerd-shim-runc-v2", "-v"}, want: containerdVer},
	{argv: []string{"/usr/bin/runc", "--version"}, want: "libseccomp"},
	{argv: []string{EtcdPath, "--version"}, want: "etcd Version"},
}

// CheckChroot runs the checks of the userland, the tools and every CNI plugin
// (CNI_COMMAND=VERSION) chrooted into root. It returns how many programs ran.
func CheckChroot(ctx context.Context, root string, progress io.Writer) (int, error) {
	checks := slices.Concat(userlandChecks, toolChecks)

	plugins, err := filepath.Glob(filepath.Join(root, "opt/cni/bin/*"))
	if err != nil {
		return 0, err
	}

	for _, p := range plugins {
		checks = append(checks, chrootCheck{argv: []string{path.Join("/opt/cni/bin", filepath.Base(p))}, env: []string{"CNI_COMMAND=VERSION"}, want: "cniVersion"})
	}

	return len(checks), runChecks(ctx, root, checks, progress)
}

func runChecks(ctx context.Context, root string, checks []chrootCheck, progress io.Writer) error {
	for _, c := range checks {
		out, err := runChrooted(ctx, root, c.argv, c.env)
		if err != nil || !strings.Contains(out, c.want) {
			return fmt.Errorf("%s does not run in the image (want %q in its output): %w\n%s", strings.Join(c.argv, " "), c.want, err, out)
		}

		fmt.Fprintf(progress, "  ok  %s\n", strings.Join(c.argv, " "))
	}

	return nil
}

// runChrooted runs argv chrooted into root, in a new network namespace so nothing can touch
// the host's firewall.
func runChrooted(ctx context.Context, root string, argv, env []string) (string, error) {
	var out bytes.Buffer

	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	// exec looks the program up on the host before the chroot; a path inside root that does not
	// exist on the host is still what the child executes after chroot.
	cmd.Path = argv[0]
	cmd.Env = append([]string{"PATH=/usr/sbin:/usr/bin"}, env...)
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root, Cloneflags: syscall.CLONE_NEWNET}

	if os.Geteuid() != 0 {
		// Without root: a user namespace where we are root is enough to chroot.
		cmd.SysProcAttr.Cloneflags |= syscall.CLONE_NEWUSER
		cmd.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}}
		cmd.SysProcAttr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}}
	}

	err := cmd.Run()

	return out.String(), err
}
