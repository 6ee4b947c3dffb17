package imager

import (
	"bytes"
	"debug/pe"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/talos-go/talos/internal/metal"
	"github.com/talos-go/talos/internal/uki"
)

// The unified kernel image is the stub with the kernel, initramfs, arguments and os-release in
// sections of their own, after the stub's and aligned, the same bytes from the same inputs.
func TestBuildUKI(t *testing.T) {
	if _, err := os.Stat(uki.Stub); err != nil {
		t.Skipf("no systemd EFI stub (apt-get install systemd-boot-efi): %v", err)
	}

	dir := t.TempDir()
	kernel, initrd := filepath.Join(dir, "vmlinuz"), filepath.Join(dir, "initramfs.img")

	if err := os.WriteFile(kernel, bytes.Repeat([]byte("K"), 12345), 0o644); err != nil {
		t.Fatal(err)
	}

	if err := os.WriteFile(initrd, bytes.Repeat([]byte("I"), 70000), 0o644); err != nil {
		t.Fatal(err)
	}

	var builds [][]byte

	for i := range 2 {
		out := filepath.Join(dir, "uki-"+string(rune('a'+i))+".efi")
		if err := buildUKI(kernel, initrd, nil, out); err != nil {
			t.Fatal(err)
		}

		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}

		builds = append(builds, b)
	}

	if !bytes.Equal(builds[0], builds[1]) {
		t.Error("two builds of the same inputs differ")
	}

	f, err := pe.NewFile(bytes.NewReader(builds[0]))
	if err != nil {
		t.Fatal(err)
	}

	align := f.OptionalHeader.(*pe.OptionalHeader64).SectionAlignment
	end := uint32(0)

	want := map[string]string{".linux": strings.Repeat("K", 12345), ".initrd": strings.Repeat("I", 70000), ".cmdline": strings.Join(metal.DefaultKernelArgs, " ")}

	for _, s := range f.Sections {
		if s.VirtualAddress < end {
			t.Errorf("section %s at 0x%x overlaps the one before (ending 0x%x)", s.Name, s.VirtualAddress, end)
		}

		end = s.VirtualAddress + s.VirtualSize

		w, ok := want[s.Name]
		if !ok {
			continue
		}

		delete(want, s.Name)

		data, err := s.Data()
		if err != nil {
			t.Fatal(err)
		}

		if s.VirtualAddress%align != 0 || !strings.HasPrefix(string(data), w) {
			t.Errorf("section %s: at 0x%x (alignment 0x%x), %d bytes, not the input", s.Name, s.VirtualAddress, align, len(data))
		}
	}

	if len(want) > 0 {
		t.Errorf("sections missing: %v", want)
	}
}

// A metal image built with --pcr-key carries the PCR signature of the UKI of its kernel and
// initramfs (which a node booting a signed UKI builds its next slot from); pcr-keygen never
// overwrites a key, and writes it 0600.
func TestMetalImagePCRSignature(t *testing.T) {
	dir := t.TempDir()
	kernel, initrd, pcrKey := filepath.Join(dir, "vmlinuz"), filepath.Join(dir, "initramfs.img"), filepath.Join(dir, "pcr-signing-key.pem")

	for p, content := range map[string]string{kernel: "kernel", initrd: "initramfs"} {
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	var out bytes.Buffer

	for _, args := range [][]string{{"keygen", "--out", dir}, {"pcr-keygen", "--out", pcrKey}} {
		if err := Main(args, &out); err != nil {
			t.Fatal(err)
		}
	}

	if fi, err := os.Stat(pcrKey); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the PCR signing key: %v %v", fi, err)
	}

	if err := Main([]string{"pcr-keygen", "--out", pcrKey}, &out); err == nil || !strings.Contains(err.Error(), "never overwritten") {
		t.Errorf("pcr-keygen over a key: %v", err)
	}

	img, files := filepath.Join(dir, "metal.img"), filepath.Join(dir, "files")
	if err := Main([]string{"build", "--key", filepath.Join(dir, "image-signing.key"), "--version", "v1.2.3", "--gzip=false",
		"--vmlinuz", kernel, "--initramfs", initrd, "--pcr-key", pcrKey, "--out", img}, &out); err != nil {
		t.Fatal(err)
	}

	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	keys, err := LoadPublicKeys(filepath.Join(dir, "image-signing.pub"))
	if err != nil {
		t.Fatal(err)
	}

	if _, err = ExtractFrom(f, keys, files); err != nil {
		t.Fatal(err)
	}

	pkey, _ := os.ReadFile(filepath.Join(files, PCRPublicKeyName))
	sig, _ := os.ReadFile(filepath.Join(files, PCRSignatureName))
	section := func(s string) uki.Section { return uki.BytesSection("", []byte(s)) }

	if _, err = uki.Signed(strings.Join(metal.DefaultKernelArgs, " "), section("kernel"), section("initramfs"), pkey, sig); err != nil {
		t.Errorf("the image's PCR signature for its kernel and initramfs: %v", err)
	}

	if _, err = uki.Signed(strings.Join(metal.DefaultKernelArgs, " "), section("kernel"), section("another"), pkey, sig); err == nil {
		t.Error("the image's PCR signature approves another initramfs")
	}
}
