package slots

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/talos-go/talos/internal/meta"
	"github.com/talos-go/talos/internal/partition"
)

const testCmdline = "talos.platform=metal console=ttyS0 init_on_alloc=1"

// bootFolder is an installed node's BOOT: the given slots with a kernel and an initramfs, and
// the menu the installer writes (slot A only).
func bootFolder(t *testing.T, installed ...string) string {
	t.Helper()

	boot := t.TempDir()
	for _, s := range installed {
		for _, f := range []string{SlotKernel, SlotInitramfs} {
			if err := os.MkdirAll(Dir(boot, s), 0o700); err != nil {
				t.Fatal(err)
			}

			if err := os.WriteFile(filepath.Join(Dir(boot, s), f), []byte(s+f), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}

	if err := os.MkdirAll(filepath.Join(boot, "grub"), 0o700); err != nil {
		t.Fatal(err)
	}

	if err := os.WriteFile(GRUBConfigPath(boot), []byte(partition.GRUBConfig(A, []partition.GRUBSlot{{Name: A}}, testCmdline)), 0o600); err != nil {
		t.Fatal(err)
	}

	return boot
}

func grubDefault(t *testing.T, boot string) string {
	t.Helper()

	d, err := GRUBDefault(boot)
	if err != nil {
		t.Fatal(err)
	}

	return d
}

func TestSetGRUBDefault(t *testing.T) {
	boot := bootFolder(t, A, B)

	if err := SetGRUBDefault(boot, B); err != nil {
		t.Fatal(err)
	}

	cfg, _ := os.ReadFile(GRUBConfigPath(boot))
	for _, want := range []string{`set default="B"`, "linux /A/vmlinuz " + testCmdline + "\n", "linux /B/vmlinuz " + testCmdline + "\n", "initrd /B/initramfs.img"} {
		if !strings.Contains(string(cfg), want) {
			t.Errorf("menu has no %q:\n%s", want, cfg)
		}
	}

	// Back to A: the kernel arguments are kept from the menu, not doubled.
	if err := SetGRUBDefault(boot, A); err != nil {
		t.Fatal(err)
	}

	cfg, _ = os.ReadFile(GRUBConfigPath(boot))
	if grubDefault(t, boot) != A || strings.Count(string(cfg), testCmdline) != 2 {
		t.Errorf("menu after going back to A:\n%s", cfg)
	}

	// A slot without its initramfs is not bootable: refused, the menu unchanged.
	os.Remove(filepath.Join(Dir(boot, B), SlotInitramfs))

	if err := SetGRUBDefault(boot, B); err == nil || !strings.Contains(err.Error(), "slot B holds no kernel") {
		t.Errorf("default to a slot without initramfs: %v", err)
	}

	if after, _ := os.ReadFile(GRUBConfigPath(boot)); string(after) != string(cfg) {
		t.Errorf("a refused default changed the menu:\n%s", after)
	}
}

// Slots holding a unified kernel image are chainloaded, with the kernel arguments and the slot
// as BOOT_IMAGE; the menu's arguments are read back from such an entry too.
func TestSetGRUBDefaultUKI(t *testing.T) {
	boot := bootFolder(t, A)

	if err := os.MkdirAll(Dir(boot, B), 0o700); err != nil {
		t.Fatal(err)
	}

	if err := os.WriteFile(filepath.Join(Dir(boot, B), SlotUKI), []byte("uki"), 0o600); err != nil {
		t.Fatal(err)
	}

	if !KernelSlotInstalled(boot, B) || !UKISlot(boot, B) || UKISlot(boot, A) {
		t.Fatal("slot B holds a UKI: installed, a UKI slot; A is not")
	}

	if err := SetGRUBDefault(boot, B); err != nil {
		t.Fatal(err)
	}

	cfg, _ := os.ReadFile(GRUBConfigPath(boot))
	if !strings.Contains(string(cfg), "linux /A/vmlinuz "+testCmdline+"\n") {
		t.Errorf("menu lost slot A:\n%s", cfg)
	}

	os.RemoveAll(Dir(boot, A))

	// The last write reads the arguments back from the chainloader entry, the only one left.
	for range 2 {
		if err := SetGRUBDefault(boot, B); err != nil {
			t.Fatal(err)
		}
	}

	cfg, _ = os.ReadFile(GRUBConfigPath(boot))
	if want := "chainloader /B/uki.efi BOOT_IMAGE=/B/uki.efi " + testCmdline + "\n"; !strings.Contains(string(cfg), want) || strings.Count(string(cfg), testCmdline) != 1 {
		t.Errorf("menu has no %q (once):\n%s", want, cfg)
	}
}

// A slot's image carrying a schematic boots with its extraKernelArgs after the shared arguments,
// in its own entry only; the shared ones are read back without them, whichever entry is read.
func TestSetGRUBDefaultSchematicArgs(t *testing.T) {
	boot := bootFolder(t, A, B)

	withSchematic := func(slot, args string) {
		y := "customization:\n  extraKernelArgs: [" + args + "]\n"
		if err := os.WriteFile(filepath.Join(Dir(boot, slot), "schematic.yaml"), []byte(y), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	entries := func() (string, string) {
		cfg, _ := os.ReadFile(GRUBConfigPath(boot))
		var a, b string

		for _, m := range grubLinuxRE.FindAllStringSubmatch(string(cfg), -1) {
			if m[1] == A {
				a = m[3]
			} else {
				b = m[3]
			}
		}

		return a, b
	}

	// An upgrade into B with a schematic.
	withSchematic(B, "x=1, y")

	if err := SetGRUBDefault(boot, B); err != nil {
		t.Fatal(err)
	}

	if a, b := entries(); a != testCmdline || b != testCmdline+" x=1 y" {
		t.Errorf("after the upgrade into B: A %q, B %q", a, b)
	}

	// The next upgrade, into A, with another schematic; then a rollback to B.
	withSchematic(A, "z=2")

	for _, def := range []string{A, B, B} {
		if err := SetGRUBDefault(boot, def); err != nil {
			t.Fatal(err)
		}

		if a, b := entries(); a != testCmdline+" z=2" || b != testCmdline+" x=1 y" {
			t.Errorf("default %s: A %q, B %q", def, a, b)
		}
	}

	// A schematic that does not read is refused: the slot would boot without its arguments.
	withSchematic(A, "z=2]\n  bogus: [")

	if err := SetGRUBDefault(boot, A); err == nil || !strings.Contains(err.Error(), "slot A") {
		t.Errorf("a slot with a broken schematic: %v", err)
	}
}

func TestBooted(t *testing.T) {
	for cmdline, want := range map[string]string{
		"BOOT_IMAGE=/A/vmlinuz talos.platform=metal":  A,
		"talos.platform=metal BOOT_IMAGE=/B/vmlinuz":  B,
		"talos.platform=metal":                        "",
		"BOOT_IMAGE=/C/vmlinuz":                       "",
		"XBOOT_IMAGE=/B/vmlinuz":                      "",
		" BOOT_IMAGE=/B/uki.efi talos.platform=metal": B,
		"BOOT_IMAGE=/A/uki.efix":                      "",
	} {
		if got := Booted(cmdline); got != want {
			t.Errorf("Booted(%q) = %q, want %q", cmdline, got, want)
		}
	}
}

// An upgrade on metal: GRUB boots the new slot once; while it is tried GRUB's default is the
// old slot again, so a hang or crash (a reset) boots the old slot, which records the fallback.
func TestChooseBootedTrialAndFallback(t *testing.T) {
	boot := bootFolder(t, A, B)
	store, _ := meta.Open(t.TempDir())

	// What the upgrade leaves: boot-once B, GRUB's default B, EPHEMERAL to be wiped.
	if err := store.Set(meta.ActiveSlot, A, meta.BootOnce, B, meta.WipeEphemeral, "1", meta.UpgradeTo, "v1.99.0"); err != nil {
		t.Fatal(err)
	}

	if err := SetGRUBDefault(boot, B); err != nil {
		t.Fatal(err)
	}

	b, err := ChooseBooted(boot, store, grubDefault(t, boot))
	if err != nil {
		t.Fatal(err)
	}

	if b.Slot != B || !b.Trial || !b.WipeEphemeral {
		t.Fatalf("first boot after the upgrade: %+v", b)
	}

	if d := grubDefault(t, boot); d != A {
		t.Fatalf("GRUB's default while B is tried is %s, want A", d)
	}

	// B never reports: the machine is reset and GRUB boots A.
	b, err = ChooseBooted(boot, store, grubDefault(t, boot))
	if err != nil {
		t.Fatal(err)
	}

	v, _ := store.Read()
	if b.Slot != A || b.Trial || b.WipeEphemeral || v[meta.ActiveSlot] != A || v[meta.TrialSlot] != "" || !strings.Contains(v[meta.Fallback], "did not report") {
		t.Fatalf("boot after the failed trial: %+v, META %v", b, v)
	}
}

func TestChooseBootedSuccess(t *testing.T) {
	boot := bootFolder(t, A, B)
	store, _ := meta.Open(t.TempDir())

	if err := store.Set(meta.ActiveSlot, A, meta.BootOnce, B); err != nil {
		t.Fatal(err)
	}

	if _, err := ChooseBooted(boot, store, B); err != nil {
		t.Fatal(err)
	}

	// machined reports success and points GRUB at B (as the upgrade manager does).
	if done, err := MarkBootSuccessful(store, B); err != nil || !done {
		t.Fatalf("success: %v %v", done, err)
	}

	if err := SetGRUBDefault(boot, B); err != nil {
		t.Fatal(err)
	}

	b, err := ChooseBooted(boot, store, grubDefault(t, boot))
	if err != nil {
		t.Fatal(err)
	}

	v, _ := store.Read()
	if b.Slot != B || b.Trial || v[meta.ActiveSlot] != B || grubDefault(t, boot) != B {
		t.Fatalf("boot after a successful upgrade: %+v, META %v", b, v)
	}
}

// A slot picked in GRUB's menu by hand runs and becomes the active one; a reset's record is
// passed on (STATE and EPHEMERAL only) and stays until the caller has wiped.
func TestChooseBootedPickedSlotAndReset(t *testing.T) {
	boot := bootFolder(t, A, B)
	store, _ := meta.Open(t.TempDir())

	if err := store.Set(meta.ActiveSlot, A, meta.ResetWipe, "STATE,META,EPHEMERAL"); err != nil {
		t.Fatal(err)
	}

	b, err := ChooseBooted(boot, store, B)
	if err != nil {
		t.Fatal(err)
	}

	v, _ := store.Read()
	if b.Slot != B || v[meta.ActiveSlot] != B || grubDefault(t, boot) != B || !strings.Contains(b.Reason, "GRUB booted slot B") {
		t.Errorf("slot picked in GRUB: %+v, META %v", b, v)
	}

	if strings.Join(b.ResetWipe, ",") != "STATE,EPHEMERAL" || v[meta.ResetWipe] == "" {
		t.Errorf("reset record: %v, META %q", b.ResetWipe, v[meta.ResetWipe])
	}
}
