package upgrade

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/talos-go/talos/internal/atomicfile"
	"github.com/talos-go/talos/internal/container"
	"github.com/talos-go/talos/internal/imager"
	"github.com/talos-go/talos/internal/metal"
	"github.com/talos-go/talos/internal/slots"
	"github.com/talos-go/talos/internal/uki"
)

// A metal node booting a signed UKI (installed from one) upgrades to a UKI too: one of the
// image's kernel and initramfs with the PCR signature the image carries, made with the key its
// UKI was signed with, since its TPM disk keys open only with what that key signs.

// bootsUKI reports whether this node booted a UKI slot.
func (m *Manager) bootsUKI() bool { return m.metal() && slots.UKISlot(m.R.Paths.Boot(), m.Slot) }

// checkPCRSignature refuses an image this node could not boot its disks from.
func (m *Manager) checkPCRSignature(staging string) error {
	pkey, err := os.ReadFile(filepath.Join(staging, imager.PCRPublicKeyName))
	if err != nil {
		return fmt.Errorf("%w: this node boots a signed UKI, and the image carries no PCR signature for its kernel and initramfs: build it with `make metal-image` beside the boot assets' PCR signing key (_out/pcr-signing-key.pem)", imager.ErrRefused)
	}

	booted, err := os.ReadFile(filepath.Join(container.InitramfsDir, uki.PublicKeyFile))
	if err != nil {
		return fmt.Errorf("this node's UKI PCR public key: %w", err)
	}

	if !bytes.Equal(booted, pkey) {
		return fmt.Errorf("%w: the image's PCR signature is made with another key than this node's UKI (its TPM disk keys open only with that key's): sign the image with the boot assets' PCR signing key", imager.ErrRefused)
	}

	return nil
}

// toUKI replaces a slot's kernel and initramfs, written from an image, with their UKI and the
// image's PCR signature (checked to approve them), built with this node's stub.
func toUKI(dir string) error {
	read := func(name string) ([]byte, error) { return os.ReadFile(filepath.Join(dir, name)) }

	pkey, err := read(imager.PCRPublicKeyName)
	if err != nil {
		return err
	}

	sig, err := read(imager.PCRSignatureName)
	if err != nil {
		return err
	}

	kernel, err := uki.FileSection(".linux", filepath.Join(dir, slots.SlotKernel))
	if err != nil {
		return err
	}

	initrd, err := uki.FileSection(".initrd", filepath.Join(dir, slots.SlotInitramfs))
	if err != nil {
		return err
	}

	sections, err := uki.Signed(strings.Join(metal.DefaultKernelArgs, " "), kernel, initrd, pkey, sig)
	if err != nil {
		return fmt.Errorf("the image's PCR signature: %w", err)
	}

	if err = uki.Build(filepath.Join(container.InitramfsDir, metal.InitramfsStub), sections, filepath.Join(dir, slots.SlotUKI)); err != nil {
		return err
	}

	for _, name := range []string{slots.SlotKernel, slots.SlotInitramfs} {
		if err = os.Remove(filepath.Join(dir, name)); err != nil {
			return err
		}
	}

	return atomicfile.SyncDir(dir)
}
