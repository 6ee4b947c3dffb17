// Package uki builds unified kernel images (systemd's EFI stub with the kernel, the initramfs,
// the kernel arguments and the PCR signature in sections of their own) and predicts PCR 11 as
// the stub measures them: the same code for the boot assets' UKI and an installed node's.
package uki

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"debug/pe"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
)

// Stub is systemd's EFI stub (Debian's systemd-boot-efi): the UEFI program a unified kernel image
// is made of, which starts the kernel in its .linux section with the initramfs in .initrd and the
// arguments in .cmdline.
var Stub = "/usr/lib/systemd/boot/efi/linuxx64.efi.stub"

// Section is one section a UKI adds to the stub: its contents are written by Write, Size bytes
// whose SHA-256 is Digest (what the stub measures).
type Section struct {
	Name   string
	Size   int64
	Digest []byte
	Write  func(io.Writer) error
}

// BytesSection is a section holding b.
func BytesSection(name string, b []byte) Section {
	d := sha256.Sum256(b)

	return Section{Name: name, Size: int64(len(b)), Digest: d[:], Write: func(w io.Writer) error {
		_, err := w.Write(b)

		return err
	}}
}

// FileSection is a section holding the file at path (read once now for its digest, again when
// written).
func FileSection(name, path string) (Section, error) {
	return StreamSection(name, func(w io.Writer) error {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()

		_, err = io.Copy(w, f)

		return err
	})
}

// StreamSection is a section whose contents write produces, the same bytes at each call (it is
// called now for the size and digest, and again when the UKI is written).
func StreamSection(name string, write func(io.Writer) error) (Section, error) {
	h := sha256.New()
	n := &counter{w: h}

	if err := write(n); err != nil {
		return Section{}, fmt.Errorf("the UKI's %s: %w", name, err)
	}

	return Section{Name: name, Size: n.n, Digest: h.Sum(nil), Write: write}, nil
}

type counter struct {
	w io.Writer
	n int64
}

func (c *counter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)

	return n, err
}

// PE offsets (the PE/COFF specification).
const (
	coffSections   = 2  // NumberOfSections, from the COFF header
	coffOptSize    = 16 // SizeOfOptionalHeader
	coffHeaderSize = 20
	optSectAlign   = 32 // PE32+ optional header: SectionAlignment
	optFileAlign   = 36
	optImageSize   = 56
	optHeadersSize = 60
	sectionSize    = 40
	// IMAGE_SCN_CNT_INITIALIZED_DATA | IMAGE_SCN_MEM_READ: what a UKI's added sections are.
	dataReadOnly = 0x40000040
)

// Write writes the UKI: the stub with sections after its own, each at the stub's section
// alignment, in the order given. Same inputs give the same bytes.
func Write(stub []byte, sections []Section, out io.Writer) error {
	f, err := pe.NewFile(bytes.NewReader(stub))
	if err != nil {
		return fmt.Errorf("reading the EFI stub: %w", err)
	}

	if _, ok := f.OptionalHeader.(*pe.OptionalHeader64); !ok {
		return errors.New("the EFI stub is not a 64-bit PE")
	}

	le := binary.LittleEndian
	coff := int(le.Uint32(stub[0x3c:])) + 4
	opt := coff + coffHeaderSize
	table := opt + int(le.Uint16(stub[coff+coffOptSize:]))
	n := int(le.Uint16(stub[coff+coffSections:]))

	sectAlign, fileAlign := uint64(le.Uint32(stub[opt+optSectAlign:])), int64(le.Uint32(stub[opt+optFileAlign:]))
	headers := int(le.Uint32(stub[opt+optHeadersSize:]))

	if end := table + (n+len(sections))*sectionSize; end > headers {
		return fmt.Errorf("the EFI stub's headers have no room for %d more sections", len(sections))
	}

	var next uint64
	for _, s := range f.Sections {
		next = max(next, uint64(s.VirtualAddress)+uint64(max(s.VirtualSize, s.Size)))
	}

	head := bytes.Clone(stub)
	pos := alignUp(int64(len(stub)), fileAlign)

	for i, s := range sections {
		if len(s.Name) > 8 {
			return fmt.Errorf("section name %s is longer than 8 bytes", s.Name)
		}

		va := alignUp(int64(next), int64(sectAlign))
		raw := alignUp(s.Size, fileAlign)

		h := head[table+(n+i)*sectionSize:][:sectionSize]
		clear(h)
		copy(h, s.Name)
		le.PutUint32(h[8:], uint32(s.Size))
		le.PutUint32(h[12:], uint32(va))
		le.PutUint32(h[16:], uint32(raw))
		le.PutUint32(h[20:], uint32(pos))
		le.PutUint32(h[36:], dataReadOnly)

		if va+s.Size > 1<<32 || pos+raw > 1<<32 {
			return fmt.Errorf("section %s does not fit a PE image (4 GiB)", s.Name)
		}

		next = uint64(va + s.Size)
		pos += raw
	}

	le.PutUint16(head[coff+coffSections:], uint16(n+len(sections)))
	le.PutUint32(head[opt+optImageSize:], uint32(alignUp(int64(next), int64(sectAlign))))

	w := &counter{w: out}
	if _, err = w.Write(head); err != nil {
		return err
	}

	for _, s := range sections {
		if err = pad(w, fileAlign); err != nil {
			return err
		}

		start := w.n
		if err = s.Write(w); err != nil {
			return fmt.Errorf("writing the UKI's %s: %w", s.Name, err)
		}

		if w.n-start != s.Size {
			return fmt.Errorf("the UKI's %s changed while it was written (%d bytes, was %d)", s.Name, w.n-start, s.Size)
		}
	}

	return pad(w, fileAlign)
}

func pad(w *counter, align int64) error {
	_, err := w.Write(make([]byte, alignUp(w.n, align)-w.n))

	return err
}

func alignUp(v, align int64) int64 { return (v + align - 1) / align * align }

// Build writes the UKI of the stub file and sections to path (through a temporary file beside
// it, renamed into place).
func Build(stubPath string, sections []Section, path string) error {
	stub, err := os.ReadFile(stubPath)
	if err != nil {
		return fmt.Errorf("no systemd EFI stub for the unified kernel image (%s): install Debian's systemd-boot-efi (apt-get install systemd-boot-efi): %w", stubPath, err)
	}

	tmp := path + ".tmp"

	out, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)

	bw := bufio.NewWriterSize(out, 1<<20)

	if err = Write(stub, sections, bw); err == nil {
		err = bw.Flush()
	}

	if err == nil {
		err = out.Sync()
	}

	if cerr := out.Close(); err == nil {
		err = cerr
	}

	if err != nil {
		return err
	}

	return os.Rename(tmp, path)
}

// OSRelease is a UKI's .osrel.
const OSRelease = "NAME=Talos\nID=talos\nPRETTY_NAME=Talos (metal)\n"

// Sections are a Talos UKI's sections before its PCR signature: .osrel, .cmdline (the default
// kernel arguments), .linux and .initrd, in the image's order.
func Sections(cmdline string, kernel, initrd Section) []Section {
	kernel.Name, initrd.Name = ".linux", ".initrd"

	return []Section{BytesSection(".osrel", []byte(OSRelease)), BytesSection(".cmdline", []byte(cmdline)), kernel, initrd}
}
