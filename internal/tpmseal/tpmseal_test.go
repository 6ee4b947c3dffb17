package tpmseal_test

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"testing"

	"github.com/google/go-tpm/tpm2"

	"github.com/talos-go/talos/internal/tpmseal"
	"github.com/talos-go/talos/internal/tpmseal/swtpm"
)

func extendPCR7(t *testing.T, tpm *swtpm.TPM) {
	t.Helper()

	d := sha256.Sum256([]byte("secure boot keys changed"))
	if _, err := (tpm2.PCRExtend{
		PCRHandle: tpm2.AuthHandle{Handle: tpm2.TPMHandle(tpmseal.PCR), Auth: tpm2.PasswordAuth(nil)},
		Digests:   tpm2.TPMLDigestValues{Digests: []tpm2.TPMTHA{{HashAlg: tpm2.TPMAlgSHA256, Digest: d[:]}}},
	}).Execute(tpm); err != nil {
		t.Fatal(err)
	}
}

// TestSealUnseal seals with swtpm (a real TPM 2.0 emulator): the same TPM unseals the secret,
// another TPM does not, nor the same TPM once PCR 7 has changed.
func TestSealUnseal(t *testing.T) {
	tpm := swtpm.Start(t, t.TempDir())
	secret := []byte("0123456789abcdef0123456789abcdef")

	sealed, err := tpmseal.Seal(tpm, secret)
	if err != nil {
		t.Fatal(err)
	}

	if bytes.Contains(sealed.Private, secret) || bytes.Contains(sealed.Public, secret) {
		t.Fatal("the sealed blob holds the secret in the clear")
	}

	got, err := tpmseal.Unseal(tpm, sealed)
	if err != nil || !bytes.Equal(got, secret) {
		t.Fatalf("unseal: %q, %v", got, err)
	}

	if _, err = tpmseal.Unseal(swtpm.Start(t, t.TempDir()), sealed); err == nil {
		t.Fatal("another TPM unsealed the key")
	}

	extendPCR7(t, tpm)

	if _, err = tpmseal.Unseal(tpm, sealed); !errors.Is(err, tpmseal.ErrPCRChanged) {
		t.Fatalf("unseal after PCR 7 changed: %v", err)
	}

	// Told PCR 7's new value, the TPM itself refuses: the policy is the TPM's, not ours.
	rsp, err := tpm2.PCRRead{PCRSelectionIn: tpm2.TPMLPCRSelection{PCRSelections: []tpm2.TPMSPCRSelection{
		{Hash: tpm2.TPMAlgSHA256, PCRSelect: tpm2.PCClientCompatible.PCRs(tpmseal.PCR)},
	}}}.Execute(tpm)
	if err != nil {
		t.Fatal(err)
	}

	now := sha256.Sum256(rsp.PCRValues.Digests[0].Buffer)
	forged := *sealed
	forged.PCRDigest = now[:]

	if _, err = tpmseal.Unseal(tpm, &forged); err == nil {
		t.Fatal("unsealed with PCR 7 changed")
	}
}

// TestRestartKeepsKey: the TPM's state survives a restart of the emulator (a reboot).
func TestRestartKeepsKey(t *testing.T) {
	dir := t.TempDir()
	tpm := swtpm.Start(t, dir)

	sealed, err := tpmseal.Seal(tpm, []byte("k"))
	if err != nil {
		t.Fatal(err)
	}

	tpm.Stop(t)

	if got, err := tpmseal.Unseal(swtpm.Start(t, dir), sealed); err != nil || string(got) != "k" {
		t.Fatalf("unseal after the TPM restarted: %q, %v", got, err)
	}
}
