package encryption

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"

	"github.com/talos-go/talos/internal/tpmseal"
	"github.com/talos-go/talos/internal/tpmseal/swtpm"
)

const volumes = `version: v1alpha1
machine:
  type: worker
  token: abc.def
  ca: {crt: "", key: ""}
cluster:
  controlPlane: {endpoint: https://10.5.0.2:6443}
  network: {}
---
apiVersion: v1alpha1
kind: VolumeConfig
name: STATE
encryption:
  provider: luks2
  keys:
    - slot: 0
      nodeID: {}
    - slot: 1
      kms:
        endpoint: grpc://10.5.0.1:4050
---
apiVersion: v1alpha1
kind: VolumeConfig
name: EPHEMERAL
encryption:
  provider: luks2
  options: [no_read_workqueue]
  keys:
    - slot: 0
      static:
        passphrase: hunter2
      lockToState: true
`

func TestFromConfig(t *testing.T) {
	cfg, err := configloader.NewFromBytes([]byte(volumes))
	if err != nil {
		t.Fatal(err)
	}

	state, err := FromConfig(cfg, "STATE")
	if err != nil {
		t.Fatal(err)
	}

	if len(state.Keys) != 2 || !state.Keys[0].NodeID || state.Keys[1].KMS != "grpc://10.5.0.1:4050" || state.Keys[1].Slot != 1 {
		t.Fatalf("STATE: %+v", state)
	}

	eph, err := FromConfig(cfg, "EPHEMERAL")
	if err != nil {
		t.Fatal(err)
	}

	if len(eph.Keys) != 1 || string(eph.Keys[0].Static) != "hunter2" || !eph.Keys[0].LockToState || eph.Options[0] != "no_read_workqueue" {
		t.Fatalf("EPHEMERAL: %+v", eph)
	}

	// The META round trip keeps everything.
	v, err := state.Marshal()
	if err != nil || strings.Contains(v, "\n") {
		t.Fatalf("marshal: %q %v", v, err)
	}

	back, err := Unmarshal(v)
	if err != nil || back.Keys[1].KMS != state.Keys[1].KMS || !back.Keys[0].NodeID {
		t.Fatalf("unmarshal: %+v %v", back, err)
	}

	// Without a VolumeConfig, the legacy machine.systemDiskEncryption is read.
	legacy := strings.SplitN(volumes, "---", 2)[0]
	legacy = strings.Replace(legacy, "  token: abc.def\n", "  token: abc.def\n  systemDiskEncryption:\n    state:\n      provider: luks2\n      keys:\n        - slot: 3\n          nodeID: {}\n", 1)

	cfg, err = configloader.NewFromBytes([]byte(legacy))
	if err != nil {
		t.Fatal(err)
	}

	if s, err := FromConfig(cfg, "STATE"); err != nil || s == nil || s.Keys[0].Slot != 3 || !s.Keys[0].NodeID {
		t.Fatalf("legacy STATE: %+v %v", s, err)
	}

	if s, err := FromConfig(cfg, "EPHEMERAL"); err != nil || s != nil {
		t.Fatalf("legacy EPHEMERAL (not encrypted): %+v %v", s, err)
	}
}

func TestFromConfigNamesTheBadField(t *testing.T) {
	cfg, err := configloader.NewFromBytes([]byte(strings.Replace(volumes, "[no_read_workqueue]", "[fast_please]", 1)))
	if err != nil {
		t.Fatal(err)
	}

	if _, err = FromConfig(cfg, "EPHEMERAL"); err == nil || !strings.Contains(err.Error(), "VolumeConfig EPHEMERAL: encryption.options") {
		t.Fatalf("unknown option: %v", err)
	}
}

// fakeKMS is a stand-in KMS for the key derivation (the real server is tested in internal/kms):
// it reverses the bytes and checks the node.
type fakeKMS struct{ node string }

func (f fakeKMS) Seal(_ context.Context, node string, data []byte) ([]byte, error) {
	if node != f.node {
		return nil, errors.New("wrong node")
	}

	out := bytes.Clone(data)
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}

	return out, nil
}

func (f fakeKMS) Unseal(ctx context.Context, node string, data []byte) ([]byte, error) {
	return f.Seal(ctx, node, data)
}

func (fakeKMS) Close() error { return nil }

func TestPassphrases(t *testing.T) {
	ctx := context.Background()
	const node = "5f1c0a2e-8d3b-4c6f-9e7a-1b2c3d4e5f60"

	env := Env{Label: "EPHEMERAL", NodeUUID: node, Salt: []byte("salt"),
		KMS: func(context.Context, string) (Sealer, error) { return fakeKMS{node: node}, nil }}

	// nodeID: the same on every boot, different per volume and per machine.
	a, _, err := env.newPassphrase(ctx, Key{NodeID: true})
	if err != nil {
		t.Fatal(err)
	}

	b, err := env.passphrase(ctx, Key{NodeID: true}, nil)
	if err != nil || !bytes.Equal(a, b) {
		t.Fatalf("nodeID again: %q vs %q, %v", a, b, err)
	}

	other := env
	other.Label = "STATE"

	if c, _ := other.passphrase(ctx, Key{NodeID: true}, nil); bytes.Equal(a, c) {
		t.Fatal("STATE and EPHEMERAL share a nodeID key")
	}

	// Locked to STATE: the salt is part of it, and it is refused without one.
	locked, _ := env.passphrase(ctx, Key{NodeID: true, LockToState: true}, nil)
	if !bytes.HasSuffix(locked, []byte("salt")) || bytes.Equal(locked, a) {
		t.Fatalf("locked key %q", locked)
	}

	noSalt := env
	noSalt.Salt = nil

	if _, err = noSalt.passphrase(ctx, Key{NodeID: true, LockToState: true}, nil); err == nil || !strings.Contains(err.Error(), SaltFile) {
		t.Fatalf("locked key without STATE's salt: %v", err)
	}

	// A UUID without entropy is no key.
	for _, id := range []string{"", "00000000-0000-0000-0000-000000000000", "11111111-2222-3333-4444-555555555555"} {
		bad := env
		bad.NodeUUID = id

		if _, err = bad.passphrase(ctx, Key{NodeID: true}, nil); err == nil {
			t.Fatalf("UUID %q gave a key", id)
		}
	}

	// KMS: a random key, sealed into the token; unsealed from it again.
	p, tok, err := env.newPassphrase(ctx, Key{Slot: 2, KMS: "grpc://kms"})
	if err != nil || tok == nil || tok.Keyslots[0] != "2" || tok.Type != TokenType || len(p) != 32 {
		t.Fatalf("kms key: %q %+v %v", p, tok, err)
	}

	q, err := env.passphrase(ctx, Key{Slot: 2, KMS: "grpc://kms"}, tok)
	if err != nil || !bytes.Equal(p, q) {
		t.Fatalf("kms key again: %v", err)
	}

	if _, err = env.passphrase(ctx, Key{Slot: 2, KMS: "grpc://kms"}, nil); err == nil {
		t.Fatal("a kms key without its token")
	}

	// TPM: a random key sealed to swtpm (a real TPM 2.0), into the token; unsealed from it again.
	env.TPM = swtpm.Start(t, t.TempDir()).Open
	env.SecureBoot = func() bool { return false }

	p, tok, err = env.newPassphrase(ctx, Key{Slot: 3, TPM: true})
	if err != nil || tok == nil || tok.Keyslots[0] != "3" || tok.Type != TokenTypeTPM || tok.TPM == nil || len(p) != 32 {
		t.Fatalf("tpm key: %q %+v %v", p, tok, err)
	}

	if q, err = env.passphrase(ctx, Key{Slot: 3, TPM: true}, tok); err != nil || !bytes.Equal(p, q) {
		t.Fatalf("tpm key again: %v", err)
	}

	if _, err = env.passphrase(ctx, Key{Slot: 3, TPM: true}, nil); err == nil || !strings.Contains(err.Error(), "no sealed key") {
		t.Fatalf("a tpm key without its token: %v", err)
	}

	if _, _, err = env.newPassphrase(ctx, Key{Slot: 3, TPM: true, TPMCheckSecureBoot: true}); err == nil || !strings.Contains(err.Error(), "checkSecurebootStatusOnEnroll") {
		t.Fatalf("a tpm key needing Secure Boot, without it: %v", err)
	}

	elsewhere := env
	elsewhere.TPM = swtpm.Start(t, t.TempDir()).Open

	if _, err = elsewhere.passphrase(ctx, Key{Slot: 3, TPM: true}, tok); err == nil {
		t.Fatal("another machine's TPM unsealed the key")
	}

	if s, _ := env.passphrase(ctx, Key{Static: []byte("pw")}, nil); string(s) != "pw" {
		t.Fatalf("static key %q", s)
	}

	testSignedTPMKey(t, env)
}

// On a node booted from a signed UKI, a TPM key is sealed to PCR 7 and the PCR 11 values the
// UKI's PCR signing key signs: it unseals while PCR 11 holds the signed value, not once the boot
// moved past it, and not without the UKI's signature.
func testSignedTPMKey(t *testing.T, env Env) {
	ctx := context.Background()
	tpm := swtpm.Start(t, t.TempDir())

	phase := func(name string) []byte {
		tp, err := tpm.Open()
		if err != nil {
			t.Fatal(err)
		}
		defer tp.Close()

		if err = tpmseal.ExtendPhase(tp, name); err != nil {
			t.Fatal(err)
		}

		v, err := tpmseal.ReadSigned(tp)
		if err != nil {
			t.Fatal(err)
		}

		return v
	}

	pcrKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}

	pol := tpmseal.PolicyPCRDigest(tpmseal.PCRSigned, phase("enter-machined"))
	aHash := sha256.Sum256(pol)

	sig, err := rsa.SignPKCS1v15(rand.Reader, pcrKey, crypto.SHA256, aHash[:])
	if err != nil {
		t.Fatal(err)
	}

	env.TPM = tpm.Open
	unsigned := env
	env.PCRSigning = func() (*rsa.PublicKey, []tpmseal.SignedPolicy, bool, error) {
		return &pcrKey.PublicKey, []tpmseal.SignedPolicy{{Policy: pol, Signature: sig}}, true, nil
	}

	p, tok, err := env.newPassphrase(ctx, Key{Slot: 4, TPM: true})
	if err != nil || tok.TPM == nil || tok.TPM.SignedPCR != tpmseal.PCRSigned {
		t.Fatalf("signed tpm key: %+v %v", tok, err)
	}

	if q, err := env.passphrase(ctx, Key{Slot: 4, TPM: true}, tok); err != nil || !bytes.Equal(p, q) {
		t.Fatalf("signed tpm key again: %v", err)
	}

	if _, err = unsigned.passphrase(ctx, Key{Slot: 4, TPM: true}, tok); err == nil || !strings.Contains(err.Error(), "signed UKI") {
		t.Errorf("signed tpm key without the UKI's signature: %v", err)
	}

	phase("start-the-world")

	if _, err = env.passphrase(ctx, Key{Slot: 4, TPM: true}, tok); !errors.Is(err, tpmseal.ErrNotSigned) {
		t.Errorf("signed tpm key after start-the-world: %v", err)
	}
}

func TestIsLUKS(t *testing.T) {
	dir := t.TempDir()

	for name, content := range map[string][]byte{"luks": append(bytes.Clone(Magic), 0, 2), "xfs": []byte("XFSB\x00\x00\x10\x00")} {
		path := dir + "/" + name
		if err := os.WriteFile(path, content, 0o600); err != nil {
			t.Fatal(err)
		}

		got, err := IsLUKS(path)
		if err != nil || got != (name == "luks") {
			t.Fatalf("%s: %v %v", name, got, err)
		}
	}
}
