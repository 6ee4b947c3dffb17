package uki

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"debug/pe"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"

	"github.com/talos-go/talos/internal/tpmseal"
)

// The boot phases extended into PCR 11 after the stub, upstream's names and order. The boot
// stage does the initramfs's part and opens the disks (upstream's machined does that), so it
// extends EnterInitrd as it starts, LeaveInitrd and EnterMachined before it opens the disks, and
// StartTheWorld once they are open: a disk key unseals only at EnterMachined, the one phase the
// PCR signing key signs.
const (
	EnterInitrd   = "enter-initrd"
	LeaveInitrd   = "leave-initrd"
	EnterMachined = "enter-machined"
	StartTheWorld = "start-the-world"
)

// SignedPhases are the phases up to the one a UKI's .pcrsig approves.
var SignedPhases = []string{EnterInitrd, LeaveInitrd, EnterMachined}

// MeasuredSections are the sections systemd's stub (252, Debian 12's) measures into PCR 11, in
// its order (not the image's): each section's name with its terminating NUL, then its contents.
// .pcrsig is left out: it holds the signatures of the values this yields.
var MeasuredSections = []string{".linux", ".osrel", ".cmdline", ".initrd", ".splash", ".dtb", ".pcrpkey"}

// PredictPCR11 is PCR 11's SHA-256 value once the stub has booted a UKI of sections and the
// boot has extended it with each of phases (the SHA-256 of its name).
func PredictPCR11(sections []Section, phases ...string) []byte {
	pcr := make([]byte, sha256.Size)
	extendDigest := func(d []byte) {
		v := sha256.Sum256(append(pcr, d...))
		pcr = v[:]
	}
	extend := func(data []byte) {
		d := sha256.Sum256(data)
		extendDigest(d[:])
	}

	for _, name := range MeasuredSections {
		for _, s := range sections {
			if s.Name == name {
				extend(append([]byte(name), 0))
				extendDigest(s.Digest)
			}
		}
	}

	for _, p := range phases {
		extend([]byte(p))
	}

	return pcr
}

// FileSections are the measured sections of the UKI at path, as the stub loads them
// (VirtualSize bytes, zeros past the file's).
func FileSections(path string) ([]Section, error) {
	f, err := pe.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading the unified kernel image: %w", err)
	}
	defer f.Close()

	var out []Section

	for _, name := range MeasuredSections {
		s := f.Section(name)
		if s == nil {
			continue
		}

		data, err := s.Data()
		if err != nil {
			return nil, fmt.Errorf("the unified kernel image's %s: %w", name, err)
		}

		loaded := make([]byte, s.VirtualSize)
		copy(loaded, data)
		out = append(out, BytesSection(name, loaded))
	}

	return out, nil
}

// The stub hands a UKI's .pcrsig and .pcrpkey to the initramfs as these files.
const (
	SignatureFile = "/.extra/tpm2-pcr-signature.json"
	PublicKeyFile = "/.extra/tpm2-pcr-public-key.pem"
)

// signature is .pcrsig's JSON (systemd-measure's): per bank, the PCR policies the key signed.
type signature struct {
	SHA256 []signedPolicy `json:"sha256"`
}

type signedPolicy struct {
	PCRs []int  `json:"pcrs"`
	PKFP string `json:"pkfp"` // SHA-256 of the key's SubjectPublicKeyInfo, hex
	Pol  string `json:"pol"`  // the TPM2_PolicyPCR digest, hex
	Sig  string `json:"sig"`  // RSASSA-PKCS1-v1_5 SHA-256 of the policy, base64
}

// Sign is the .pcrpkey and .pcrsig sections for a UKI of sections: key's public half, and its
// signature of PCR 11 at EnterMachined after the stub booted that UKI (the .pcrpkey section is
// measured too, so it is part of the value signed).
func Sign(key *rsa.PrivateKey, sections []Section) ([]Section, error) {
	pkey, err := PublicKeyPEM(&key.PublicKey)
	if err != nil {
		return nil, err
	}

	pk := BytesSection(".pcrpkey", pkey)
	pcr := PredictPCR11(append(sections, pk), SignedPhases...)
	pol := tpmseal.PolicyPCRDigest(tpmseal.PCRSigned, pcr)
	aHash := sha256.Sum256(pol) // the policy and its empty reference: what PolicyAuthorize checks

	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, aHash[:])
	if err != nil {
		return nil, err
	}

	der, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
	fp := sha256.Sum256(der)

	b, err := json.Marshal(signature{SHA256: []signedPolicy{{
		PCRs: []int{tpmseal.PCRSigned}, PKFP: hex.EncodeToString(fp[:]),
		Pol: hex.EncodeToString(pol), Sig: base64.StdEncoding.EncodeToString(sig),
	}}})
	if err != nil {
		return nil, err
	}

	return []Section{pk, BytesSection(".pcrsig", b)}, nil
}

// PublicKeyPEM is an RSA public key as .pcrpkey holds it (PKIX PEM).
func PublicKeyPEM(key *rsa.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(key)
	if err != nil {
		return nil, err
	}

	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}

// ParsePublicKey reads a .pcrpkey.
func ParsePublicKey(b []byte) (*rsa.PublicKey, error) {
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, errors.New("the PCR public key is not PEM")
	}

	k, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("the PCR public key: %w", err)
	}

	rk, ok := k.(*rsa.PublicKey)
	if !ok {
		return nil, errors.New("the PCR public key is not RSA")
	}

	return rk, nil
}

// ParseSignature reads a .pcrsig: the PCR 11 policies it holds for key.
func ParseSignature(b []byte, key *rsa.PublicKey) ([]tpmseal.SignedPolicy, error) {
	var s signature
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("the PCR signature: %w", err)
	}

	der, err := x509.MarshalPKIXPublicKey(key)
	if err != nil {
		return nil, err
	}

	fp := sha256.Sum256(der)

	var out []tpmseal.SignedPolicy

	for _, p := range s.SHA256 {
		if len(p.PCRs) != 1 || p.PCRs[0] != tpmseal.PCRSigned || p.PKFP != hex.EncodeToString(fp[:]) {
			continue
		}

		pol, err := hex.DecodeString(p.Pol)
		if err != nil {
			return nil, fmt.Errorf("the PCR signature's policy: %w", err)
		}

		sig, err := base64.StdEncoding.DecodeString(p.Sig)
		if err != nil {
			return nil, fmt.Errorf("the PCR signature's signature: %w", err)
		}

		out = append(out, tpmseal.SignedPolicy{Policy: pol, Signature: sig})
	}

	if len(out) == 0 {
		return nil, errors.New("the PCR signature holds no PCR 11 policy for this PCR public key")
	}

	return out, nil
}

// Booted is the PCR public key and signed policies the stub handed to this boot (under root:
// "/" in the boot stage, the initramfs's folder for machined); ok is false when this boot is not
// of a UKI with them.
func Booted(root string) (key *rsa.PublicKey, policies []tpmseal.SignedPolicy, ok bool, err error) {
	kb, err := os.ReadFile(root + PublicKeyFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, false, nil
	} else if err != nil {
		return nil, nil, false, err
	}

	sb, err := os.ReadFile(root + SignatureFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, false, nil
	} else if err != nil {
		return nil, nil, false, err
	}

	if key, err = ParsePublicKey(kb); err != nil {
		return nil, nil, false, err
	}

	if policies, err = ParseSignature(sb, key); err != nil {
		return nil, nil, false, err
	}

	return key, policies, true, nil
}

// Approves reports whether policies approve PCR 11 holding pcr.
func Approves(policies []tpmseal.SignedPolicy, pcr []byte) bool {
	want := tpmseal.PolicyPCRDigest(tpmseal.PCRSigned, pcr)

	for _, p := range policies {
		if string(p.Policy) == string(want) {
			return true
		}
	}

	return false
}

// Signed is a signed Talos UKI's sections: Sections with the .pcrpkey and .pcrsig given (a
// signed UKI's, or a signed upgrade image's), checked first: the signature must approve PCR 11
// as this UKI's boot leaves it when the disks are opened, or the UKI would not open them.
func Signed(cmdline string, kernel, initrd Section, pcrpkey, pcrsig []byte) ([]Section, error) {
	key, err := ParsePublicKey(pcrpkey)
	if err != nil {
		return nil, err
	}

	policies, err := ParseSignature(pcrsig, key)
	if err != nil {
		return nil, err
	}

	sections := append(Sections(cmdline, kernel, initrd), BytesSection(".pcrpkey", pcrpkey))

	if pcr := PredictPCR11(sections, SignedPhases...); !Approves(policies, pcr) {
		return nil, fmt.Errorf("the PCR signature does not approve this kernel and initramfs (PCR 11 at %s would be %x): they are not the ones it was made for", EnterMachined, pcr)
	}

	return append(sections, BytesSection(".pcrsig", pcrsig)), nil
}
