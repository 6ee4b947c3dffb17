package slots

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/talos-go/talos/internal/atomicfile"
	"github.com/talos-go/talos/internal/partition"
	"github.com/talos-go/talos/internal/schematic"
)

// On metal the boot stage's part is split between GRUB and the initramfs: GRUB boots the
// default entry of BOOT's grub/grub.cfg; the initramfs (ChooseBooted) reads META as the boot
// stage does and points GRUB's default back at the active slot while a slot is tried, so a
// trial that hangs or crashes boots the previous slot on the next reset (GRUB's boot-once).

// Files of a metal slot: what GRUB loads, a kernel and initramfs, or a unified kernel image.
const (
	SlotKernel    = "vmlinuz"
	SlotInitramfs = "initramfs.img"
	SlotUKI       = "uki.efi"
)

// GRUBConfigPath is GRUB's menu on BOOT.
func GRUBConfigPath(bootDir string) string { return filepath.Join(bootDir, "grub", "grub.cfg") }

// KernelSlotInstalled reports whether a metal slot holds a kernel and an initramfs, or a
// unified kernel image.
func KernelSlotInstalled(bootDir, slot string) bool {
	return UKISlot(bootDir, slot) || (regular(filepath.Join(Dir(bootDir, slot), SlotKernel)) && regular(filepath.Join(Dir(bootDir, slot), SlotInitramfs)))
}

// UKISlot reports whether a metal slot holds a unified kernel image.
func UKISlot(bootDir, slot string) bool { return regular(filepath.Join(Dir(bootDir, slot), SlotUKI)) }

func regular(path string) bool {
	fi, err := os.Stat(path)

	return err == nil && fi.Mode().IsRegular()
}

// grubLinuxRE finds the slot and the kernel arguments of a menu entry.
var grubLinuxRE = regexp.MustCompile(`(?m)^\s*(?:linux /([AB])/vmlinuz|chainloader /([AB])/uki\.efi BOOT_IMAGE=/[AB]/uki\.efi) ?(.*)$`)

// SlotArgs are a slot's own kernel arguments (partition.GRUBSlot.Args): the extraKernelArgs of
// the schematic its image carries (none without one). A schematic that does not read is an
// error: booting the slot without its arguments would not be the image its ID names.
func SlotArgs(bootDir, slot string) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(Dir(bootDir, slot), schematic.FileName))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}

	s, err := schematic.Unmarshal(b)
	if err != nil {
		return nil, fmt.Errorf("slot %s: %w", slot, err)
	}

	return s.Customization.ExtraKernelArgs, nil
}

// sharedArgs are the menu's shared kernel arguments: an entry's, without the slot's own at their
// end. The entry read is the other slot's than def's when the menu has it (an upgrade has just
// replaced def's slot, so its own arguments may differ from those in its entry), else def's.
func sharedArgs(bootDir, def string, menu []byte) (string, error) {
	var slot, args string

	for _, m := range grubLinuxRE.FindAllSubmatch(menu, -1) {
		name := string(m[1]) + string(m[2])
		if slot == "" || (name != def && slot == def) {
			slot, args = name, strings.TrimSpace(string(m[3]))
		}
	}

	if slot == "" {
		return "", fmt.Errorf("GRUB's menu %s has no slot entry: reinstall the node", GRUBConfigPath(bootDir))
	}

	own, err := SlotArgs(bootDir, slot)
	if err != nil {
		return "", err
	}

	fields := strings.Fields(args)
	if n := len(fields) - len(own); len(own) > 0 && n >= 0 && slices.Equal(fields[n:], own) {
		fields = fields[:n]
	}

	return strings.Join(fields, " "), nil
}

// SetGRUBDefault rewrites GRUB's menu on BOOT: an entry per installed slot, def booted by
// default, with the kernel arguments the menu has now. BOOT is frozen and thawed after the
// write: GRUB reads XFS without replaying its log, so the new menu must be in place on disk
// before the next reset. An unchanged menu is not written.
func SetGRUBDefault(bootDir, def string) error {
	if !Valid(def) {
		return fmt.Errorf("GRUB default %q is not a slot", def)
	}

	path := GRUBConfigPath(bootDir)

	old, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reading GRUB's menu: %w", err)
	}

	shared, err := sharedArgs(bootDir, def, old)
	if err != nil {
		return err
	}

	var entries []partition.GRUBSlot

	for _, s := range []string{A, B} {
		if KernelSlotInstalled(bootDir, s) {
			args, err := SlotArgs(bootDir, s)
			if err != nil {
				return err
			}

			entries = append(entries, partition.GRUBSlot{Name: s, UKI: UKISlot(bootDir, s), Args: args})
		}
	}

	if !KernelSlotInstalled(bootDir, def) {
		return fmt.Errorf("GRUB default: slot %s holds no kernel and initramfs, nor a unified kernel image", def)
	}

	cfg := partition.GRUBConfig(def, entries, shared)
	if cfg == string(old) {
		return Quiesce(bootDir) // the slots' files may be new
	}

	if err = atomicfile.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return err
	}

	return Quiesce(bootDir)
}

// GRUBDefault returns the default slot of BOOT's GRUB menu.
func GRUBDefault(bootDir string) (string, error) {
	b, err := os.ReadFile(GRUBConfigPath(bootDir))
	if err != nil {
		return "", err
	}

	m := regexp.MustCompile(`(?m)^set default="?([AB])"?$`).FindSubmatch(b)
	if m == nil {
		return "", errors.New("GRUB's menu names no default slot")
	}

	return string(m[1]), nil
}

// The freeze ioctls of linux/fs.h (_IOWR('X', 119|120, int)); golang.org/x/sys has no names
// for them.
const (
	fiFreeze = 0xc0045877
	fiThaw   = 0xc0045878
)

// Quiesce freezes and thaws the filesystem mounted at dir: freezing writes every change in
// its place and empties the journal, so a reader that ignores the journal (GRUB) sees them.
// A folder that is not a mount of its own (a test's, a process node's) is only synced.
func Quiesce(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()

	if err = unix.Syncfs(int(f.Fd())); err != nil {
		return err
	}

	if !isMountPoint(dir) {
		return nil
	}

	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), fiFreeze, 0); errno != 0 {
		return fmt.Errorf("freezing %s: %w", dir, errno)
	}

	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), fiThaw, 0); errno != 0 {
		return fmt.Errorf("thawing %s: %w", dir, errno)
	}

	return nil
}

func isMountPoint(dir string) bool {
	var st, parent unix.Stat_t
	if unix.Stat(dir, &st) != nil || unix.Stat(filepath.Join(dir, ".."), &parent) != nil {
		return false
	}

	return st.Dev != parent.Dev
}
