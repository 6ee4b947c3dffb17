package tpmseal

import (
	"bytes"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/google/go-tpm/tpm2"
	"github.com/google/go-tpm/tpm2/transport"
)

// PCRSigned is the PCR whose values a signed policy approves: 11, where a UKI's stub measures the
// UKI's sections and the boot its phases (upstream's keys: PCR 7, and PCR 11 as the UKI's PCR
// signing key signed it, so that an updated UKI, signed with the same key, still unseals).
const PCRSigned = 11

// SignedPolicy is one approved PCR 11 value: its TPM2_PolicyPCR digest and the PCR signing key's
// signature of it (RSASSA-PKCS1-v1_5, SHA-256 over the digest and the empty policy reference),
// as systemd-measure writes them into a UKI's .pcrsig.
type SignedPolicy struct {
	Policy    []byte
	Signature []byte
}

// PolicyPCRDigest is the policy digest TPM2_PolicyPCR makes from an empty policy for one SHA-256
// PCR holding value: what a PCR signing key signs for that value.
func PolicyPCRDigest(pcr int, value []byte) []byte {
	sel := tpm2.Marshal(tpm2.TPMLPCRSelection{PCRSelections: []tpm2.TPMSPCRSelection{
		{Hash: tpm2.TPMAlgSHA256, PCRSelect: tpm2.PCClientCompatible.PCRs(uint(pcr))},
	}})
	pcrDigest := sha256.Sum256(value)

	h := sha256.New()
	h.Write(make([]byte, sha256.Size))
	binary.Write(h, binary.BigEndian, uint32(tpm2.TPMCCPolicyPCR)) //nolint:errcheck // a hash never fails
	h.Write(sel)
	h.Write(pcrDigest[:])

	return h.Sum(nil)
}

// loadPCRKey loads the PCR signing key's public part into the owner hierarchy (a key in the null
// hierarchy would only give null tickets, which PolicyAuthorize refuses).
func loadPCRKey(t transport.TPM, key *rsa.PublicKey) (*tpm2.LoadExternalResponse, func(), error) {
	if key.E != 65537 {
		return nil, nil, errors.New("the PCR signing key's exponent is not 65537")
	}

	rsp, err := tpm2.LoadExternal{
		InPublic: tpm2.New2B(tpm2.TPMTPublic{
			Type:             tpm2.TPMAlgRSA,
			NameAlg:          tpm2.TPMAlgSHA256,
			ObjectAttributes: tpm2.TPMAObject{SignEncrypt: true, UserWithAuth: true},
			Parameters: tpm2.NewTPMUPublicParms(tpm2.TPMAlgRSA, &tpm2.TPMSRSAParms{
				Scheme: tpm2.TPMTRSAScheme{
					Scheme:  tpm2.TPMAlgRSASSA,
					Details: tpm2.NewTPMUAsymScheme(tpm2.TPMAlgRSASSA, &tpm2.TPMSSigSchemeRSASSA{HashAlg: tpm2.TPMAlgSHA256}),
				},
				KeyBits: tpm2.TPMKeyBits(key.N.BitLen()),
			}),
			Unique: tpm2.NewTPMUPublicID(tpm2.TPMAlgRSA, &tpm2.TPM2BPublicKeyRSA{Buffer: key.N.Bytes()}),
		}),
		Hierarchy: tpm2.TPMRHOwner,
	}.Execute(t)
	if err != nil {
		return nil, nil, fmt.Errorf("loading the PCR signing key: %w", err)
	}

	return rsp, func() { _, _ = tpm2.FlushContext{FlushHandle: rsp.ObjectHandle}.Execute(t) }, nil
}

// SealSigned seals secret to this TPM under a policy that any PCR 11 value key signs satisfies,
// and PCR 7's current value.
func SealSigned(t transport.TPM, secret []byte, key *rsa.PublicKey) (*Sealed, error) {
	pk, flushKey, err := loadPCRKey(t, key)
	if err != nil {
		return nil, err
	}
	defer flushKey()

	// A trial session checks no ticket: the policy is "what key approves", then PCR 7.
	sealed, err := sealWithPolicy(t, secret, func(sess tpm2.Session) error {
		_, err := (tpm2.PolicyAuthorize{
			PolicySession: sess.Handle(), KeySign: pk.Name,
			CheckTicket: tpm2.TPMTTKVerified{Tag: tpm2.TPMSTVerified, Hierarchy: tpm2.TPMRHNull},
		}).Execute(t)
		if err != nil {
			return fmt.Errorf("computing the signed PCR policy: %w", err)
		}

		return nil
	})
	if err != nil {
		return nil, err
	}

	sealed.SignedPCR, sealed.PCRKeyName = PCRSigned, pk.Name.Buffer

	return sealed, nil
}

// ErrNotSigned reports that PCR 11's value is none the signed policies approve: the machine
// booted something the PCR signing key did not sign, or is past the boot phase they cover.
var ErrNotSigned = errors.New("PCR 11's value is not one the PCR signing key approved: this boot is not of a UKI signed with that key, or past the phase that may unseal")

// UnsealSigned unseals s (sealed by SealSigned) with this TPM, PCR 11's current value approved by
// one of policies, signed by key.
func UnsealSigned(t transport.TPM, s *Sealed, key *rsa.PublicKey, policies []SignedPolicy) ([]byte, error) {
	pk, flushKey, err := loadPCRKey(t, key)
	if err != nil {
		return nil, err
	}
	defer flushKey()

	if !bytes.Equal(pk.Name.Buffer, s.PCRKeyName) {
		return nil, errors.New("the key was sealed for another PCR signing key than this UKI's")
	}

	return unseal(t, s, func(sess tpm2.Session) error {
		if _, err := (tpm2.PolicyPCR{PolicySession: sess.Handle(), Pcrs: signedSelection()}).Execute(t); err != nil {
			return fmt.Errorf("reading PCR %d into the policy: %w", PCRSigned, err)
		}

		current, err := tpm2.PolicyGetDigest{PolicySession: sess.Handle()}.Execute(t)
		if err != nil {
			return err
		}

		for _, p := range policies {
			if !bytes.Equal(p.Policy, current.PolicyDigest.Buffer) {
				continue
			}

			aHash := sha256.Sum256(p.Policy) // the policy and its (empty) reference
			verified, err := tpm2.VerifySignature{
				KeyHandle: pk.ObjectHandle,
				Digest:    tpm2.TPM2BDigest{Buffer: aHash[:]},
				Signature: tpm2.TPMTSignature{SigAlg: tpm2.TPMAlgRSASSA, Signature: tpm2.NewTPMUSignature(tpm2.TPMAlgRSASSA,
					&tpm2.TPMSSignatureRSA{Hash: tpm2.TPMAlgSHA256, Sig: tpm2.TPM2BPublicKeyRSA{Buffer: p.Signature}})},
			}.Execute(t)
			if err != nil {
				return fmt.Errorf("the PCR signing key's signature of PCR 11's policy: %w", err)
			}

			if _, err = (tpm2.PolicyAuthorize{
				PolicySession: sess.Handle(), ApprovedPolicy: tpm2.TPM2BDigest{Buffer: p.Policy}, KeySign: pk.Name, CheckTicket: verified.Validation,
			}).Execute(t); err != nil {
				return fmt.Errorf("%w (%w)", ErrNotSigned, err)
			}

			if _, err = (tpm2.PolicyPCR{PolicySession: sess.Handle(), PcrDigest: tpm2.TPM2BDigest{Buffer: s.PCRDigest}, Pcrs: selection()}).Execute(t); err != nil {
				return fmt.Errorf("%w (%w)", ErrPCRChanged, err)
			}

			return nil
		}

		return ErrNotSigned
	})
}

func signedSelection() tpm2.TPMLPCRSelection {
	return tpm2.TPMLPCRSelection{PCRSelections: []tpm2.TPMSPCRSelection{
		{Hash: tpm2.TPMAlgSHA256, PCRSelect: tpm2.PCClientCompatible.PCRs(PCRSigned)},
	}}
}

// ExtendPhase extends PCR 11's SHA-256 bank with a boot phase (the SHA-256 of its name), as
// systemd-pcrphase does: a later phase moves PCR 11 past the values signed for an earlier one.
func ExtendPhase(t transport.TPM, phase string) error {
	d := sha256.Sum256([]byte(phase))

	_, err := tpm2.PCRExtend{
		PCRHandle: tpm2.AuthHandle{Handle: tpm2.TPMHandle(PCRSigned), Auth: tpm2.PasswordAuth(nil)},
		Digests:   tpm2.TPMLDigestValues{Digests: []tpm2.TPMTHA{{HashAlg: tpm2.TPMAlgSHA256, Digest: d[:]}}},
	}.Execute(t)
	if err != nil {
		return fmt.Errorf("extending PCR %d with %s: %w", PCRSigned, phase, err)
	}

	return nil
}

// ReadSigned reads PCR 11's SHA-256 value.
func ReadSigned(t transport.TPM) ([]byte, error) {
	rsp, err := tpm2.PCRRead{PCRSelectionIn: signedSelection()}.Execute(t)
	if err != nil {
		return nil, fmt.Errorf("reading PCR %d: %w", PCRSigned, err)
	}

	if len(rsp.PCRValues.Digests) != 1 {
		return nil, fmt.Errorf("reading PCR %d: the TPM has no SHA-256 bank", PCRSigned)
	}

	return rsp.PCRValues.Digests[0].Buffer, nil
}
