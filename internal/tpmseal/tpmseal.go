// Package tpmseal seals a secret to the machine's TPM 2.0, bound to PCR 7 (the Secure Boot
// policy, as upstream's TPM disk encryption keys are): only this TPM unseals it, and only while
// PCR 7 holds the value it had when the secret was sealed.
package tpmseal

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"

	"github.com/google/go-tpm/tpm2"
	"github.com/google/go-tpm/tpm2/transport"
	"github.com/google/go-tpm/tpm2/transport/linuxtpm"
)

// PCR is the PCR a sealed secret is bound to.
const PCR = 7

// Devices are where the kernel offers the TPM: the resource manager first, as it lets several
// users share the TPM's object slots.
var Devices = []string{"/dev/tpmrm0", "/dev/tpm0"}

// Sealed is a secret as the TPM sealed it, with what unsealing it needs.
type Sealed struct {
	Public  []byte `json:"public"`  // TPM2B_PUBLIC of the sealed object
	Private []byte `json:"private"` // TPM2B_PRIVATE, encrypted by the storage root key
	PCRs    []int  `json:"pcrs"`
	// PCRDigest is SHA-256 over the PCRs' SHA-256 values at sealing: a mismatch is reported as
	// such instead of as a bare policy failure.
	PCRDigest []byte `json:"pcrDigest"`
	// SignedPCR, when set (11), is the PCR whose values the PCR signing key named PCRKeyName
	// (its TPM name) approves (SealSigned).
	SignedPCR  int    `json:"signedPCR,omitempty"`
	PCRKeyName []byte `json:"pcrKeyName,omitempty"`
}

// Open opens the machine's TPM.
func Open() (transport.TPMCloser, error) {
	for _, d := range Devices {
		if _, err := os.Stat(d); err == nil {
			return linuxtpm.Open(d)
		}
	}

	return nil, fmt.Errorf("no TPM 2.0 (%v): give the machine a TPM (qemu: --with-tpm2), or use another key type", Devices)
}

func selection() tpm2.TPMLPCRSelection {
	return tpm2.TPMLPCRSelection{PCRSelections: []tpm2.TPMSPCRSelection{
		{Hash: tpm2.TPMAlgSHA256, PCRSelect: tpm2.PCClientCompatible.PCRs(PCR)},
	}}
}

// pcrDigest is the policy's PCR digest for the PCRs' current values.
func pcrDigest(t transport.TPM) ([]byte, error) {
	rsp, err := tpm2.PCRRead{PCRSelectionIn: selection()}.Execute(t)
	if err != nil {
		return nil, fmt.Errorf("reading PCR %d: %w", PCR, err)
	}

	h := sha256.New()
	for _, d := range rsp.PCRValues.Digests {
		h.Write(d.Buffer)
	}

	return h.Sum(nil), nil
}

// srk creates the storage root key: the owner hierarchy's standard ECC template, so the same TPM
// derives the same key at every boot without keeping it.
func srk(t transport.TPM) (*tpm2.CreatePrimaryResponse, func(), error) {
	rsp, err := tpm2.CreatePrimary{PrimaryHandle: tpm2.TPMRHOwner, InPublic: tpm2.New2B(tpm2.ECCSRKTemplate)}.Execute(t)
	if err != nil {
		return nil, nil, fmt.Errorf("creating the TPM's storage root key: %w", err)
	}

	return rsp, func() { _, _ = tpm2.FlushContext{FlushHandle: rsp.ObjectHandle}.Execute(t) }, nil
}

// Seal seals secret to this TPM and PCR 7's current value.
func Seal(t transport.TPM, secret []byte) (*Sealed, error) {
	return sealWithPolicy(t, secret, nil)
}

// sealWithPolicy seals secret under the policy first adds to (nil: nothing), then PCR 7 holding
// its current value, computed in a trial session.
func sealWithPolicy(t transport.TPM, secret []byte, first func(tpm2.Session) error) (*Sealed, error) {
	digest, err := pcrDigest(t)
	if err != nil {
		return nil, err
	}

	sess, closeSession, err := tpm2.PolicySession(t, tpm2.TPMAlgSHA256, 16, tpm2.Trial())
	if err != nil {
		return nil, fmt.Errorf("starting a TPM trial session: %w", err)
	}
	defer closeSession() //nolint:errcheck // a session left open is flushed with the connection

	if first != nil {
		if err = first(sess); err != nil {
			return nil, err
		}
	}

	if _, err = (tpm2.PolicyPCR{PolicySession: sess.Handle(), PcrDigest: tpm2.TPM2BDigest{Buffer: digest}, Pcrs: selection()}).Execute(t); err != nil {
		return nil, fmt.Errorf("computing the PCR policy: %w", err)
	}

	policy, err := tpm2.PolicyGetDigest{PolicySession: sess.Handle()}.Execute(t)
	if err != nil {
		return nil, fmt.Errorf("computing the PCR policy: %w", err)
	}

	sealed, err := create(t, secret, policy.PolicyDigest.Buffer)
	if err != nil {
		return nil, err
	}

	sealed.PCRDigest = digest

	return sealed, nil
}

// create seals secret under the storage root key, unsealed only through policy.
func create(t transport.TPM, secret, policy []byte) (*Sealed, error) {
	root, flush, err := srk(t)
	if err != nil {
		return nil, err
	}
	defer flush()

	rsp, err := tpm2.Create{
		ParentHandle: tpm2.AuthHandle{Handle: root.ObjectHandle, Name: root.Name, Auth: tpm2.PasswordAuth(nil)},
		InSensitive: tpm2.TPM2BSensitiveCreate{Sensitive: &tpm2.TPMSSensitiveCreate{
			Data: tpm2.NewTPMUSensitiveCreate(&tpm2.TPM2BSensitiveData{Buffer: secret}),
		}},
		InPublic: tpm2.New2B(tpm2.TPMTPublic{
			Type:    tpm2.TPMAlgKeyedHash,
			NameAlg: tpm2.TPMAlgSHA256,
			// Only the policy authorizes unsealing (no user auth); the object never leaves this TPM.
			ObjectAttributes: tpm2.TPMAObject{FixedTPM: true, FixedParent: true, NoDA: true},
			AuthPolicy:       tpm2.TPM2BDigest{Buffer: policy},
		}),
	}.Execute(t)
	if err != nil {
		return nil, fmt.Errorf("sealing the key to the TPM: %w", err)
	}

	return &Sealed{Public: tpm2.Marshal(rsp.OutPublic), Private: tpm2.Marshal(rsp.OutPrivate), PCRs: []int{PCR}}, nil
}

// ErrPCRChanged reports PCR 7 differing from its value at sealing (Secure Boot's state or keys
// changed), or another TPM.
var ErrPCRChanged = errors.New("PCR 7 differs from its value when the key was sealed: Secure Boot's state or keys changed")

// Unseal unseals s with this TPM.
func Unseal(t transport.TPM, s *Sealed) ([]byte, error) {
	if len(s.PCRs) != 1 || s.PCRs[0] != PCR {
		return nil, fmt.Errorf("the sealed key is bound to PCRs %v: this node binds to PCR %d only", s.PCRs, PCR)
	}

	if s.SignedPCR != 0 {
		return nil, fmt.Errorf("the sealed key needs PCR %d's value signed by the UKI's PCR signing key: boot the UKI", s.SignedPCR)
	}

	digest, err := pcrDigest(t)
	if err != nil {
		return nil, err
	}

	if !bytes.Equal(digest, s.PCRDigest) {
		return nil, ErrPCRChanged
	}

	return unseal(t, s, func(sess tpm2.Session) error {
		if _, err := (tpm2.PolicyPCR{PolicySession: sess.Handle(), PcrDigest: tpm2.TPM2BDigest{Buffer: s.PCRDigest}, Pcrs: selection()}).Execute(t); err != nil {
			return fmt.Errorf("%w (%w)", ErrPCRChanged, err)
		}

		return nil
	})
}

// unseal loads s under the storage root key and unseals it through a policy session that
// satisfy fulfils.
func unseal(t transport.TPM, s *Sealed, satisfy func(tpm2.Session) error) ([]byte, error) {
	pub, err := tpm2.Unmarshal[tpm2.TPM2BPublic](s.Public)
	if err != nil {
		return nil, fmt.Errorf("the sealed key's public part: %w", err)
	}

	priv, err := tpm2.Unmarshal[tpm2.TPM2BPrivate](s.Private)
	if err != nil {
		return nil, fmt.Errorf("the sealed key's private part: %w", err)
	}

	root, flush, err := srk(t)
	if err != nil {
		return nil, err
	}
	defer flush()

	loaded, err := tpm2.Load{
		ParentHandle: tpm2.AuthHandle{Handle: root.ObjectHandle, Name: root.Name, Auth: tpm2.PasswordAuth(nil)},
		InPublic:     *pub,
		InPrivate:    *priv,
	}.Execute(t)
	if err != nil {
		return nil, fmt.Errorf("loading the sealed key (was it sealed by this machine's TPM?): %w", err)
	}
	defer tpm2.FlushContext{FlushHandle: loaded.ObjectHandle}.Execute(t) //nolint:errcheck // best effort: the resource manager flushes it with the connection

	rootPub, err := root.OutPublic.Contents()
	if err != nil {
		return nil, err
	}

	// A session salted with the storage root key encrypts the secret on its way out of the TPM.
	sess, closeSession, err := tpm2.PolicySession(t, tpm2.TPMAlgSHA256, 16,
		tpm2.Salted(root.ObjectHandle, *rootPub), tpm2.AESEncryption(128, tpm2.EncryptOut))
	if err != nil {
		return nil, fmt.Errorf("starting a TPM policy session: %w", err)
	}
	defer closeSession() //nolint:errcheck // a session left open is flushed with the connection

	if err = satisfy(sess); err != nil {
		return nil, err
	}

	rsp, err := tpm2.Unseal{ItemHandle: tpm2.AuthHandle{Handle: loaded.ObjectHandle, Name: loaded.Name, Auth: sess}}.Execute(t)
	if err != nil {
		return nil, fmt.Errorf("unsealing the key: %w", err)
	}

	return rsp.OutData.Buffer, nil
}

// efiSecureBoot is the EFI global variable telling whether Secure Boot is on (4 bytes of
// attributes, then 1 when enabled).
const efiSecureBoot = "/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"

// SecureBootEnabled tells whether the firmware booted with Secure Boot on.
func SecureBootEnabled() bool {
	b, err := os.ReadFile(efiSecureBoot)

	return err == nil && len(b) == 5 && b[4] == 1
}
