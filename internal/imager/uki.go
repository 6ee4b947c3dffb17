package imager

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/talos-go/talos/internal/metal"
	"github.com/talos-go/talos/internal/uki"
)

// UKIName is the boot assets' unified kernel image (upstream's name for it).
const UKIName = "metal-amd64-uki.efi"

// buildUKI makes a unified kernel image of the kernel, the initramfs and the default kernel
// arguments, and, with a PCR signing key, its public half (.pcrpkey) and its signature of PCR 11
// as this UKI's boot leaves it when the disks are opened (.pcrsig).
func buildUKI(kernel, initramfs string, pcrKey *rsa.PrivateKey, out string) error {
	sections, signed, err := ukiSections(kernel, initramfs, pcrKey)
	if err != nil {
		return err
	}

	return uki.Build(uki.Stub, append(sections, signed...), out)
}

// ukiSections are the sections of the UKI of kernel and initramfs and, with a PCR signing key,
// its .pcrpkey and .pcrsig (signed).
func ukiSections(kernel, initramfs string, pcrKey *rsa.PrivateKey) (sections, signed []uki.Section, err error) {
	k, err := uki.FileSection(".linux", kernel)
	if err != nil {
		return nil, nil, err
	}

	i, err := uki.FileSection(".initrd", initramfs)
	if err != nil {
		return nil, nil, err
	}

	sections = uki.Sections(strings.Join(metal.DefaultKernelArgs, " "), k, i)

	if pcrKey != nil {
		if signed, err = uki.Sign(pcrKey, sections); err != nil {
			return nil, nil, fmt.Errorf("signing the UKI's PCR 11 values: %w", err)
		}
	}

	return sections, signed, nil
}

// A metal image for nodes booting signed UKIs carries the .pcrpkey and .pcrsig of the UKI of its
// kernel and initramfs: such a node builds that UKI into its new slot.
const (
	PCRPublicKeyName = "pcr-public-key.pem"
	PCRSignatureName = "pcr-signature.json"
)

// writePCRSignature writes PCRPublicKeyName and PCRSignatureName for the UKI of kernel and
// initramfs into dir.
func writePCRSignature(keyPath, kernel, initramfs, dir string) error {
	key, err := LoadPCRKey(keyPath)
	if err != nil {
		return fmt.Errorf("--pcr-key: %w", err)
	}

	_, signed, err := ukiSections(kernel, initramfs, key)
	if err != nil {
		return err
	}

	for _, s := range signed {
		name := map[string]string{".pcrpkey": PCRPublicKeyName, ".pcrsig": PCRSignatureName}[s.Name]

		f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}

		if err = s.Write(f); err != nil {
			f.Close()

			return err
		}

		if err = f.Close(); err != nil {
			return err
		}
	}

	return nil
}

// LoadPCRKey reads a PCR signing key: an RSA private key in PEM, PKCS#1 (`talosctl gen
// secureboot pcr`'s pcr-signing-key.pem) or PKCS#8.
func LoadPCRKey(path string) (*rsa.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}

	block, _ := pem.Decode(b)
	if block == nil {
		return nil, fmt.Errorf("%s is not PEM: give the PCR signing key (talosctl gen secureboot pcr)", path)
	}

	if k, err := x509.ParsePKCS1PrivateKey(block.Bytes); err == nil {
		return k, nil
	}

	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: not an RSA private key: %w", path, err)
	}

	rk, ok := k.(*rsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%s: the PCR signing key must be RSA", path)
	}

	return rk, nil
}

// GeneratePCRKey writes a new PCR signing key to path: RSA 2048 (what TPMs verify), PKCS#1
// PEM, mode 0600. It refuses to overwrite a key.
func GeneratePCRKey(path string) error {
	if _, err := os.Lstat(path); err == nil {
		return fmt.Errorf("%s already exists: keys are never overwritten; remove it or choose another --out", path)
	}

	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}

	return writeNew(path, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)}), 0o600)
}
