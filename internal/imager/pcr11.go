package imager

import (
	"crypto/sha256"
	"debug/pe"
	"fmt"
)

// UKIMeasuredSections are the sections of a unified kernel image that systemd's stub (252, Debian
// 12's) measures into PCR 11 when it boots it, in its order (not the image's): each section's name
// with its terminating NUL, then its contents. .pcrsig is left out: it holds the signatures of
// the values this yields.
var UKIMeasuredSections = []string{".linux", ".osrel", ".cmdline", ".initrd", ".splash", ".dtb", ".pcrpkey"}

// PredictPCR11 is PCR 11's SHA-256 value once the stub has booted the UKI at path and the boot
// has extended it with each of phases (the SHA-256 of its name): what a PCR signing key signs so
// that a key sealed to its approval unseals at that point of that UKI's boot.
//
// Not yet checked against a real boot (QEMU, OVMF and swtpm): the next step of the work.
func PredictPCR11(path string, phases ...string) ([]byte, error) {
	f, err := pe.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading the unified kernel image: %w", err)
	}
	defer f.Close()

	pcr := make([]byte, sha256.Size)
	extend := func(data []byte) {
		d := sha256.Sum256(data)
		v := sha256.Sum256(append(pcr, d[:]...))
		pcr = v[:]
	}

	for _, name := range UKIMeasuredSections {
		s := f.Section(name)
		if s == nil {
			continue
		}

		data, err := s.Data()
		if err != nil {
			return nil, fmt.Errorf("the unified kernel image's %s: %w", name, err)
		}

		// The stub measures the section as loaded: VirtualSize bytes, zeros past the file's.
		loaded := make([]byte, s.VirtualSize)
		copy(loaded, data)

		extend(append([]byte(name), 0))
		extend(loaded)
	}

	for _, p := range phases {
		extend([]byte(p))
	}

	return pcr, nil
}
