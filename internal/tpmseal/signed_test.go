package tpmseal_test

import (
	"bytes"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"errors"
	"testing"

	"github.com/google/go-tpm/tpm2"

	"github.com/talos-go/talos/internal/tpmseal"
	"github.com/talos-go/talos/internal/tpmseal/swtpm"
)

func extend(t *testing.T, tpm *swtpm.TPM, pcr int, what string) {
	t.Helper()

	d := sha256.Sum256([]byte(what))
	if _, err := (tpm2.PCRExtend{
		PCRHandle: tpm2.AuthHandle{Handle: tpm2.TPMHandle(pcr), Auth: tpm2.PasswordAuth(nil)},
		Digests:   tpm2.TPMLDigestValues{Digests: []tpm2.TPMTHA{{HashAlg: tpm2.TPMAlgSHA256, Digest: d[:]}}},
	}).Execute(tpm); err != nil {
		t.Fatal(err)
	}
}

// pcrAfter is a PCR's value after extending a zero PCR with whats, computed apart from the TPM
// (as an image builder predicts it).
func pcrAfter(whats ...string) []byte {
	v := make([]byte, sha256.Size)

	for _, w := range whats {
		d := sha256.Sum256([]byte(w))
		h := sha256.Sum256(append(v, d[:]...))
		v = h[:]
	}

	return v
}

func sign(t *testing.T, key *rsa.PrivateKey, pcrValue []byte) tpmseal.SignedPolicy {
	t.Helper()

	pol := tpmseal.PolicyPCRDigest(tpmseal.PCRSigned, pcrValue)
	aHash := sha256.Sum256(pol)

	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, aHash[:])
	if err != nil {
		t.Fatal(err)
	}

	return tpmseal.SignedPolicy{Policy: pol, Signature: sig}
}

// A key sealed to "PCR 11 as the PCR signing key approves it, and PCR 7": unsealed while PCR 11
// holds a value the key signed (predicted apart from the TPM), whichever of the signed phases it
// is; refused at an unsigned value (a later phase, another UKI), with a signature by another key,
// by the PCR 7 path (Unseal), and once PCR 7 changed.
func TestSealSigned(t *testing.T) {
	tpm := swtpm.Start(t, t.TempDir())
	secret := []byte("0123456789abcdef0123456789abcdef")

	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}

	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}

	sealed, err := tpmseal.SealSigned(tpm, secret, &key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}

	phases := []tpmseal.SignedPolicy{sign(t, key, pcrAfter(".linux", "enter-initrd")), sign(t, key, pcrAfter(".linux", "enter-initrd", "enter-machined"))}

	if _, err = tpmseal.UnsealSigned(tpm, sealed, &key.PublicKey, phases); !errors.Is(err, tpmseal.ErrNotSigned) {
		t.Fatalf("unsealed with PCR 11 at zero: %v", err)
	}

	extend(t, tpm, tpmseal.PCRSigned, ".linux")
	extend(t, tpm, tpmseal.PCRSigned, "enter-initrd")

	for i := range 2 {
		got, err := tpmseal.UnsealSigned(tpm, sealed, &key.PublicKey, phases)
		if err != nil || !bytes.Equal(got, secret) {
			t.Fatalf("phase %d: %q %v", i, got, err)
		}

		extend(t, tpm, tpmseal.PCRSigned, "enter-machined")
	}

	// Past the signed phases.
	if _, err = tpmseal.UnsealSigned(tpm, sealed, &key.PublicKey, phases); !errors.Is(err, tpmseal.ErrNotSigned) {
		t.Fatalf("unsealed past the signed phases: %v", err)
	}

	if _, err = tpmseal.Unseal(tpm, sealed); err == nil {
		t.Fatal("the PCR 7 path unsealed a signed-policy key")
	}

	// A fresh TPM at the signed value, with the other key's signature: refused by the TPM.
	tpm2nd := swtpm.Start(t, t.TempDir())

	sealed2, err := tpmseal.SealSigned(tpm2nd, secret, &key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}

	extend(t, tpm2nd, tpmseal.PCRSigned, ".linux")
	extend(t, tpm2nd, tpmseal.PCRSigned, "enter-initrd")

	forged := sign(t, other, pcrAfter(".linux", "enter-initrd"))
	if _, err = tpmseal.UnsealSigned(tpm2nd, sealed2, &key.PublicKey, []tpmseal.SignedPolicy{forged}); err == nil {
		t.Fatal("unsealed with another key's signature")
	}

	if _, err = tpmseal.UnsealSigned(tpm2nd, sealed2, &other.PublicKey, []tpmseal.SignedPolicy{forged}); err == nil {
		t.Fatal("unsealed naming another PCR signing key")
	}

	if got, err := tpmseal.UnsealSigned(tpm2nd, sealed2, &key.PublicKey, phases); err != nil || !bytes.Equal(got, secret) {
		t.Fatalf("the right signature: %q %v", got, err)
	}

	extend(t, tpm2nd, tpmseal.PCR, "secure boot keys changed")

	if _, err = tpmseal.UnsealSigned(tpm2nd, sealed2, &key.PublicKey, phases); !errors.Is(err, tpmseal.ErrPCRChanged) {
		t.Fatalf("unsealed after PCR 7 changed: %v", err)
	}
}
