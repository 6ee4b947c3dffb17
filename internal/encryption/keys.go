package encryption

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/google/go-tpm/tpm2/transport"

	"github.com/talos-go/talos/internal/tpmseal"
)

// Env is what this machine derives its keys from.
type Env struct {
	Label    string // the volume's label: STATE, EPHEMERAL
	NodeUUID string // the machine's SMBIOS UUID (/sys/class/dmi/id/product_uuid)
	Salt     []byte // STATE's salt (SaltFile), for keys locked to STATE
	// KMS reaches a key's KMS endpoint; nil: DialKMS.
	KMS func(ctx context.Context, endpoint string) (Sealer, error)
	// TPM opens the machine's TPM; nil: tpmseal.Open.
	TPM func() (transport.TPMCloser, error)
	// SecureBoot tells whether the firmware booted with Secure Boot; nil: tpmseal.SecureBootEnabled.
	SecureBoot func() bool
	// PCRSigning gives the PCR signing key and the PCR 11 policies of the UKI this machine booted
	// (uki.Booted; ok false: not booted from a signed UKI). When set, new TPM keys are sealed to
	// PCR 7 and the PCR 11 values that key signs, as upstream's are; keys sealed so unseal with
	// it. nil: keys are sealed to PCR 7 only.
	PCRSigning func() (key *rsa.PublicKey, policies []tpmseal.SignedPolicy, ok bool, err error)
}

// Sealer is a KMS: it seals and unseals data for a node.
type Sealer interface {
	Seal(ctx context.Context, nodeUUID string, data []byte) ([]byte, error)
	Unseal(ctx context.Context, nodeUUID string, data []byte) ([]byte, error)
	Close() error
}

// SaltFile is STATE's random salt, on STATE: keys locked to STATE mix it in.
const SaltFile = "volume-salt"

// The types of the LUKS2 header tokens holding a sealed key.
const (
	TokenType    = "talos-kms" //nolint:gosec // a token type name, not a credential
	TokenTypeTPM = "talos-tpm" //nolint:gosec // a token type name, not a credential
)

// Token is what a KMS or TPM key keeps in the volume's LUKS2 header (token id = its slot): the
// random passphrase as the KMS or the TPM sealed it.
type Token struct {
	Type      string          `json:"type"`
	Keyslots  []string        `json:"keyslots"`
	Endpoint  string          `json:"endpoint,omitempty"`
	SealedKey []byte          `json:"sealedKey,omitempty"`
	TPM       *tpmseal.Sealed `json:"tpm,omitempty"`
}

// newPassphrase makes a key slot's passphrase when the volume is formatted, with the token to
// keep in the header when the passphrase is a sealed random one.
func (e Env) newPassphrase(ctx context.Context, k Key) ([]byte, *Token, error) {
	if err := e.checkSalt(k); err != nil {
		return nil, nil, err
	}

	if k.KMS == "" && !k.TPM {
		p, err := e.passphrase(ctx, k, nil)

		return p, nil, err
	}

	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, nil, err
	}

	tok := &Token{Keyslots: []string{strconv.Itoa(k.Slot)}}

	if k.TPM {
		sealed, err := e.sealTPM(k, key)
		if err != nil {
			return nil, nil, err
		}

		tok.Type, tok.TPM = TokenTypeTPM, sealed

		return e.locked(k, key), tok, nil
	}

	kms, err := e.dial(ctx, k.KMS)
	if err != nil {
		return nil, nil, err
	}
	defer kms.Close()

	sealed, err := kms.Seal(ctx, e.NodeUUID, key)
	if err != nil {
		return nil, nil, fmt.Errorf("%s key slot %d: sealing the key with the KMS at %s: %w", e.Label, k.Slot, k.KMS, err)
	}

	tok.Type, tok.Endpoint, tok.SealedKey = TokenType, k.KMS, sealed

	return e.locked(k, key), tok, nil
}

func (e Env) sealTPM(k Key, key []byte) (*tpmseal.Sealed, error) {
	secureBoot := tpmseal.SecureBootEnabled
	if e.SecureBoot != nil {
		secureBoot = e.SecureBoot
	}

	if k.TPMCheckSecureBoot && !secureBoot() {
		return nil, fmt.Errorf("%s key slot %d (tpm): the machine did not boot with Secure Boot, and checkSecurebootStatusOnEnroll requires it: enable Secure Boot in the firmware, or set checkSecurebootStatusOnEnroll: false", e.Label, k.Slot)
	}

	tpm, err := e.openTPM()
	if err != nil {
		return nil, fmt.Errorf("%s key slot %d (tpm): %w", e.Label, k.Slot, err)
	}
	defer tpm.Close()

	sealed, err := e.seal(tpm, key)
	if err != nil {
		return nil, fmt.Errorf("%s key slot %d (tpm): %w", e.Label, k.Slot, err)
	}

	return sealed, nil
}

// seal seals key to the TPM: to PCR 7, and to the PCR 11 values the booted UKI's PCR signing
// key signs when the node boots one.
func (e Env) seal(tpm transport.TPM, key []byte) (*tpmseal.Sealed, error) {
	if e.PCRSigning == nil {
		return tpmseal.Seal(tpm, key)
	}

	pcrKey, _, ok, err := e.PCRSigning()
	if err != nil {
		return nil, fmt.Errorf("the booted UKI's PCR signing key: %w", err)
	}

	if !ok {
		return nil, errors.New("this boot is not of a UKI with a PCR signature")
	}

	return tpmseal.SealSigned(tpm, key, pcrKey)
}

// unsealTPM unseals a TPM key: with the booted UKI's signed PCR 11 policies when it was sealed
// to them.
func (e Env) unsealTPM(tpm transport.TPM, s *tpmseal.Sealed) ([]byte, error) {
	if s.SignedPCR == 0 {
		return tpmseal.Unseal(tpm, s)
	}

	if e.PCRSigning == nil {
		return nil, fmt.Errorf("the key is sealed to PCR %d values a PCR signing key approves: only the boot stage of a signed UKI opens it", s.SignedPCR)
	}

	pcrKey, policies, ok, err := e.PCRSigning()
	if err != nil {
		return nil, fmt.Errorf("the booted UKI's PCR signature: %w", err)
	}

	if !ok {
		return nil, fmt.Errorf("the key is sealed to PCR %d values a PCR signing key approves, and this boot is not of a UKI with a PCR signature: boot the node's UKI (its GRUB menu entry on UEFI)", s.SignedPCR)
	}

	return tpmseal.UnsealSigned(tpm, s, pcrKey, policies)
}

func (e Env) openTPM() (transport.TPMCloser, error) {
	if e.TPM != nil {
		return e.TPM()
	}

	return tpmseal.Open()
}

// passphrase is a key slot's passphrase; a KMS key's is unsealed from its token.
func (e Env) passphrase(ctx context.Context, k Key, tok *Token) ([]byte, error) {
	if err := e.checkSalt(k); err != nil {
		return nil, err
	}

	switch {
	case k.Static != nil:
		return e.locked(k, k.Static), nil
	case k.NodeID:
		if err := checkUUID(e.NodeUUID); err != nil {
			return nil, fmt.Errorf("%s key slot %d (nodeID): %w", e.Label, k.Slot, err)
		}

		return e.locked(k, []byte(e.NodeUUID+e.Label)), nil
	case k.KMS != "":
		if tok == nil {
			return nil, fmt.Errorf("%s key slot %d (kms): the volume's header holds no sealed key for it", e.Label, k.Slot)
		}

		kms, err := e.dial(ctx, k.KMS)
		if err != nil {
			return nil, err
		}
		defer kms.Close()

		key, err := kms.Unseal(ctx, e.NodeUUID, tok.SealedKey)
		if err != nil {
			return nil, fmt.Errorf("%s key slot %d: unsealing the key with the KMS at %s: %w", e.Label, k.Slot, k.KMS, err)
		}

		return e.locked(k, key), nil
	case k.TPM:
		if tok == nil || tok.TPM == nil {
			return nil, fmt.Errorf("%s key slot %d (tpm): the volume's header holds no sealed key for it", e.Label, k.Slot)
		}

		tpm, err := e.openTPM()
		if err != nil {
			return nil, fmt.Errorf("%s key slot %d (tpm): %w", e.Label, k.Slot, err)
		}
		defer tpm.Close()

		key, err := e.unsealTPM(tpm, tok.TPM)
		if err != nil {
			return nil, fmt.Errorf("%s key slot %d (tpm): %w", e.Label, k.Slot, err)
		}

		return e.locked(k, key), nil
	}

	return nil, fmt.Errorf("%s key slot %d names no key", e.Label, k.Slot)
}

func (e Env) checkSalt(k Key) error {
	if k.LockToState && len(e.Salt) == 0 {
		return fmt.Errorf("%s key slot %d is locked to STATE, and STATE holds no %s", e.Label, k.Slot, SaltFile)
	}

	return nil
}

// locked mixes STATE's salt into a key locked to STATE.
func (e Env) locked(k Key, p []byte) []byte {
	if !k.LockToState {
		return p
	}

	return append(append([]byte{}, p...), e.Salt...)
}

func (e Env) dial(ctx context.Context, endpoint string) (Sealer, error) {
	if e.KMS != nil {
		return e.KMS(ctx, endpoint)
	}

	return DialKMS(endpoint)
}

// checkUUID refuses a UUID too poor to derive a key from: missing, or made of few distinct
// digits (firmware fills the field with zeros or a pattern when it has no UUID).
func checkUUID(id string) error {
	digits := map[rune]bool{}

	for _, r := range strings.ToLower(id) {
		if r != '-' {
			digits[r] = true
		}
	}

	if len(id) < 32 || len(digits) < 8 {
		return errors.New("the machine's SMBIOS UUID " + strconv.Quote(id) + " has too little entropy to derive a key from: give the machine a UUID, or use a static or kms key")
	}

	return nil
}
