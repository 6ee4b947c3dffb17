package uki

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"debug/pe"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A signed UKI: the stub's sections, then ours at its alignment holding exactly their contents;
// .pcrsig approves PCR 11 at EnterMachined as predicted from the file, for the key in .pcrpkey
// only, and not the value of another initramfs or of another phase.
func TestSignedUKI(t *testing.T) {
	if _, err := os.Stat(Stub); err != nil {
		t.Skipf("no systemd EFI stub (apt-get install systemd-boot-efi): %v", err)
	}

	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}

	out := filepath.Join(t.TempDir(), "uki.efi")
	kernel, initrd := BytesSection("", bytes.Repeat([]byte("K"), 12345)), BytesSection("", bytes.Repeat([]byte("I"), 70001))
	sections := Sections("console=ttyS0", kernel, initrd)

	signed, err := Sign(key, sections)
	if err != nil {
		t.Fatal(err)
	}

	if err = Build(Stub, append(sections, signed...), out); err != nil {
		t.Fatal(err)
	}

	f, err := pe.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	align := f.OptionalHeader.(*pe.OptionalHeader64).SectionAlignment
	end := uint32(0)
	data := map[string][]byte{}

	for _, s := range f.Sections {
		if s.VirtualAddress < end {
			t.Errorf("section %s at 0x%x overlaps the one before (ending 0x%x)", s.Name, s.VirtualAddress, end)
		}

		end = s.VirtualAddress + s.VirtualSize
		b, _ := s.Data()
		data[s.Name] = b[:min(len(b), int(s.VirtualSize))]

		if ours := s.Name == ".osrel" || s.Name == ".cmdline" || s.Name == ".linux" || s.Name == ".initrd" || s.Name == ".pcrpkey" || s.Name == ".pcrsig"; ours && s.VirtualAddress%align != 0 {
			t.Errorf("section %s at 0x%x, alignment 0x%x", s.Name, s.VirtualAddress, align)
		}
	}

	for name, want := range map[string]string{".linux": string(bytes.Repeat([]byte("K"), 12345)), ".initrd": string(bytes.Repeat([]byte("I"), 70001)), ".cmdline": "console=ttyS0", ".osrel": OSRelease} {
		if string(data[name]) != want {
			t.Errorf("section %s: %d bytes, not its contents", name, len(data[name]))
		}
	}

	pub, err := ParsePublicKey(data[".pcrpkey"])
	if err != nil || !pub.Equal(&key.PublicKey) {
		t.Fatalf(".pcrpkey: %v", err)
	}

	policies, err := ParseSignature(data[".pcrsig"], pub)
	if err != nil {
		t.Fatal(err)
	}

	measured, err := FileSections(out)
	if err != nil {
		t.Fatal(err)
	}

	if !Approves(policies, PredictPCR11(measured, SignedPhases...)) {
		t.Error(".pcrsig does not approve PCR 11 at enter-machined")
	}

	if Approves(policies, PredictPCR11(measured, append(SignedPhases, StartTheWorld)...)) {
		t.Error(".pcrsig approves PCR 11 after start-the-world")
	}

	other := Sections("console=ttyS0", kernel, BytesSection("", []byte("another initramfs")))
	if Approves(policies, PredictPCR11(append(other, signed[0]), SignedPhases...)) {
		t.Error(".pcrsig approves another initramfs")
	}

	otherKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	if _, err = ParseSignature(data[".pcrsig"], &otherKey.PublicKey); err == nil {
		t.Error("the signature reads as another key's")
	}

	// Written twice, the same bytes.
	again := filepath.Join(t.TempDir(), "uki.efi")
	if err = Build(Stub, append(sections, signed...), again); err != nil {
		t.Fatal(err)
	}

	a, _ := os.ReadFile(out)
	b, _ := os.ReadFile(again)

	if !bytes.Equal(a, b) {
		t.Error("two writes of the same sections differ")
	}
}

// Signed rebuilds a signed UKI's sections from the kernel, the initramfs and the signature, and
// refuses an initramfs the signature was not made for.
func TestSigned(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}

	kernel, initrd := BytesSection("", []byte("kernel")), BytesSection("", []byte("initramfs"))

	signed, err := Sign(key, Sections("console=ttyS0", kernel, initrd))
	if err != nil {
		t.Fatal(err)
	}

	var pkey, sig []byte

	for _, s := range signed {
		var b bytes.Buffer
		if err = s.Write(&b); err != nil {
			t.Fatal(err)
		}

		if s.Name == ".pcrpkey" {
			pkey = b.Bytes()
		} else {
			sig = b.Bytes()
		}
	}

	sections, err := Signed("console=ttyS0", kernel, initrd, pkey, sig)
	if err != nil {
		t.Fatal(err)
	}

	if len(sections) != 6 || sections[4].Name != ".pcrpkey" || sections[5].Name != ".pcrsig" {
		t.Errorf("sections %v", sections)
	}

	if _, err = Signed("console=ttyS0", kernel, BytesSection("", []byte("another")), pkey, sig); err == nil || !strings.Contains(err.Error(), "does not approve") {
		t.Errorf("another initramfs: %v", err)
	}

	if _, err = Signed("quiet", kernel, initrd, pkey, sig); err == nil {
		t.Error("other default kernel arguments: accepted")
	}
}
