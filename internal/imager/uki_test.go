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
