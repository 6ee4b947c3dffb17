package imager

import (
	"bytes"
	"crypto/sha256"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/talos-go/talos/internal/metal"
)

// PCR 11 predicted for a built UKI is the extends of the measured sections' names and inputs in
// the stub's order (.linux, .osrel, .cmdline, .initrd: not the image's), then the phases: the
// sections are read whole and exact (no file-alignment padding), and another phase list or input
// gives another value.
func TestPredictPCR11(t *testing.T) {
	if _, err := os.Stat(UKIStub); err != nil {
		t.Skipf("no systemd EFI stub (apt-get install systemd-boot-efi): %v", err)
	}

	dir := t.TempDir()
	kernel, initrd, out := filepath.Join(dir, "vmlinuz"), filepath.Join(dir, "initramfs.img"), filepath.Join(dir, "uki.efi")

	kernelData, initrdData := bytes.Repeat([]byte("K"), 12345), bytes.Repeat([]byte("I"), 70001)

	if err := os.WriteFile(kernel, kernelData, 0o644); err != nil {
		t.Fatal(err)
	}

	if err := os.WriteFile(initrd, initrdData, 0o644); err != nil {
		t.Fatal(err)
	}

	if err := buildUKI(kernel, initrd, out); err != nil {
		t.Fatal(err)
	}

	pcr := make([]byte, sha256.Size)
	extend := func(data []byte) {
		d := sha256.Sum256(data)
		v := sha256.Sum256(append(pcr, d[:]...))
		pcr = v[:]
	}

	for _, s := range []struct {
		name string
		data []byte
	}{
		{".linux", kernelData},
		{".osrel", []byte("NAME=Talos\nID=talos\nPRETTY_NAME=Talos (metal)\n")},
		{".cmdline", []byte(strings.Join(metal.DefaultKernelArgs, " "))},
		{".initrd", initrdData},
	} {
		extend(append([]byte(s.name), 0))
		extend(s.data)
	}

	extend([]byte("enter-initrd"))

	got, err := PredictPCR11(out, "enter-initrd")
	if err != nil {
		t.Fatal(err)
	}

	if !bytes.Equal(got, pcr) {
		t.Fatalf("PCR 11 %x, want %x", got, pcr)
	}

	if other, _ := PredictPCR11(out, "enter-initrd", "enter-machined"); bytes.Equal(other, got) {
		t.Error("a later phase predicts the same value")
	}
}
