package install

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/talos-go/talos/internal/imager"
	"github.com/talos-go/talos/internal/metal"
	"github.com/talos-go/talos/internal/uki"
)

func TestCmdline(t *testing.T) {
	got := Cmdline("BOOT_IMAGE=/A/vmlinuz talos.platform=metal console=ttyS0 talos.config=http://10.5.0.1/x.yaml ip=dhcp", []string{"net.ifnames=0"})
	want := []string{"talos.platform=metal", "console=ttyS0", "ip=dhcp", "net.ifnames=0"}

	if !slices.Equal(got, want) {
		t.Errorf("%v, want %v", got, want)
	}
}

// An install refuses what is not a disk, and a disk too small for the partitions, naming the
// field and writing nothing.
func TestRefusals(t *testing.T) {
	log := func(string, ...any) {}

	err := ToDisk(context.Background(), Options{Disk: "/dev/null", Log: log})
	if err == nil || !strings.Contains(err.Error(), "machine.install.disk /dev/null") {
		t.Errorf("a character device: %v", err)
	}

	if os.Getuid() != 0 {
		t.Skip("a loop device needs root")
	}

	img := filepath.Join(t.TempDir(), "small.raw")
	if err = os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}

	if err = os.Truncate(img, 1<<30); err != nil {
		t.Fatal(err)
	}

	out, err := exec.Command("losetup", "--find", "--show", img).CombinedOutput()
	if err != nil {
		t.Skipf("no loop device: %v: %s", err, out)
	}

	loop := strings.TrimSpace(string(out))
	t.Cleanup(func() { exec.Command("losetup", "-d", loop).Run() })

	err = ToDisk(context.Background(), Options{Disk: loop, Log: log})
	if err == nil || !strings.Contains(err.Error(), "machine.install.disk "+loop) || !strings.Contains(err.Error(), "at least 2228 MiB") {
		t.Errorf("a 1 GiB disk: %v", err)
	}

	// Named by a link, as /dev/disk/by-id names disks, the disk is the one it points to.
	link := filepath.Join(t.TempDir(), "by-id-disk")
	if err = os.Symlink(loop, link); err != nil {
		t.Fatal(err)
	}

	err = ToDisk(context.Background(), Options{Disk: link, Log: log})
	if err == nil || !strings.Contains(err.Error(), "machine.install.disk "+link) || !strings.Contains(err.Error(), "at least 2228 MiB") {
		t.Errorf("a 1 GiB disk by a link: %v", err)
	}

	b, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}

	if strings.Trim(string(b[:1<<20]), "\x00") != "" {
		t.Error("the refused install wrote to the disk")
	}
}

func TestCopyTree(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()

	if err := os.MkdirAll(filepath.Join(src, "a/b"), 0o700); err != nil {
		t.Fatal(err)
	}

	if err := os.WriteFile(filepath.Join(src, "a/b/config.yaml"), []byte("machine: {}"), 0o600); err != nil {
		t.Fatal(err)
	}

	if err := copyTree(src, dst); err != nil {
		t.Fatal(err)
	}

	fi, err := os.Stat(filepath.Join(dst, "a/b/config.yaml"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("copied file: %v, %v", fi, err)
	}
}

// A node booted from a signed UKI installs the UKI of its own kernel and initramfs (written back
// without what the boot added) when the stub's signature approves it; an initramfs that changed
// is refused; a boot without the stub's files installs a kernel and initramfs.
func TestBootedUKI(t *testing.T) {
	root := t.TempDir()

	for name, content := range map[string]string{"init": "init", "boot/vmlinuz": "kernel", "boot/uki-stub.efi": "stub", "rootfs.sqsh": "image"} {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(name)), 0o755); err != nil {
			t.Fatal(err)
		}

		if err := os.WriteFile(filepath.Join(root, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	o := Options{Initramfs: root}

	if sections, err := o.bootedUKI(); sections != nil || err != nil {
		t.Fatalf("no stub files: %v, %v", sections, err)
	}

	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}

	kernel, err := uki.FileSection("", filepath.Join(root, "boot/vmlinuz"))
	if err != nil {
		t.Fatal(err)
	}

	initrd, err := uki.StreamSection("", func(w io.Writer) error { return imager.WriteInitramfs(w, root) })
	if err != nil {
		t.Fatal(err)
	}

	signed, err := uki.Sign(key, uki.Sections(strings.Join(metal.DefaultKernelArgs, " "), kernel, initrd))
	if err != nil {
		t.Fatal(err)
	}

	// What the boot adds after the kernel unpacked the initramfs: the stub's files, the config.
	for i, name := range []string{uki.PublicKeyFile, uki.SignatureFile} {
		var b bytes.Buffer
		if err = signed[i].Write(&b); err != nil {
			t.Fatal(err)
		}

		if err = os.MkdirAll(filepath.Join(root, filepath.Dir(name)), 0o755); err != nil {
			t.Fatal(err)
		}

		if err = os.WriteFile(filepath.Join(root, name), b.Bytes(), 0o444); err != nil {
			t.Fatal(err)
		}
	}

	if err = os.WriteFile(filepath.Join(root, "config.yaml"), []byte("secrets"), 0o600); err != nil {
		t.Fatal(err)
	}

	sections, err := o.bootedUKI()
	if err != nil || len(sections) != 6 || sections[3].Name != ".initrd" || !bytes.Equal(sections[3].Digest, initrd.Digest) {
		t.Fatalf("booted from a signed UKI: %v, %v", sections, err)
	}

	if err = os.WriteFile(filepath.Join(root, "init"), []byte("another init"), 0o644); err != nil {
		t.Fatal(err)
	}

	if _, err = o.bootedUKI(); err == nil || !strings.Contains(err.Error(), "does not approve") {
		t.Errorf("a changed initramfs: %v", err)
	}

	if err = os.Remove(filepath.Join(root, metal.InitramfsStub)); err != nil {
		t.Fatal(err)
	}

	if _, err = o.bootedUKI(); err == nil || !strings.Contains(err.Error(), "no EFI stub") {
		t.Errorf("an initramfs without the stub: %v", err)
	}
}
