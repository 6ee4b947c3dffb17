package provision

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"

	"github.com/talos-go/talos/internal/encryption"
)

// The encryption flags' patch merges into a generated config, and the node reads from it what
// upstream's cluster create asks: STATE and EPHEMERAL in LUKS2, a slot per key type, KMS keys
// sealed at the gateway, EPHEMERAL's keys locked to STATE.
func TestEncryptionPatch(t *testing.T) {
	cidr := netip.MustParsePrefix("10.5.0.0/24")

	gen, err := GenerateConfigs("enc", netip.MustParseAddr("10.5.0.2"), "", GenerateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	e := EncryptionRequest{State: true, Ephemeral: true, KeyTypes: []string{KeyTypeUUID, KeyTypeKMS, KeyTypeTPM}}

	raw, err := patch(gen.Worker, []string{e.patch(cidr)})
	if err != nil {
		t.Fatal(err)
	}

	cfg, err := configloader.NewFromBytes(raw)
	if err != nil {
		t.Fatal(err)
	}

	for _, label := range []string{"STATE", "EPHEMERAL"} {
		s, err := encryption.FromConfig(cfg, label)
		if err != nil || s == nil || len(s.Keys) != 3 {
			t.Fatalf("%s: %+v %v\n%s", label, s, err, raw)
		}

		if !s.Keys[0].NodeID || s.Keys[0].Slot != 0 || s.Keys[1].KMS != "grpc://10.5.0.1:4050" || s.Keys[1].Slot != 1 ||
			!s.Keys[2].TPM || s.Keys[2].TPMCheckSecureBoot || s.Keys[2].Slot != 2 {
			t.Errorf("%s keys: %+v", label, s.Keys)
		}

		if locked := s.Keys[0].LockToState && s.Keys[1].LockToState && s.Keys[2].LockToState; locked != (label == "EPHEMERAL") {
			t.Errorf("%s: keys locked to STATE: %v", label, locked)
		}
	}

	// Only STATE: EPHEMERAL stays plain.
	raw, err = patch(gen.Worker, []string{EncryptionRequest{State: true, KeyTypes: []string{KeyTypeUUID}}.patch(cidr)})
	if err != nil {
		t.Fatal(err)
	}

	if cfg, err = configloader.NewFromBytes(raw); err != nil {
		t.Fatal(err)
	}

	if s, err := encryption.FromConfig(cfg, "EPHEMERAL"); s != nil || err != nil {
		t.Errorf("EPHEMERAL encrypted with only --encrypt-state: %+v %v", s, err)
	}
}

func TestEncryptionFlagsChecked(t *testing.T) {
	for _, c := range []struct {
		e         EncryptionRequest
		ownKernel bool
		want      string
	}{
		{EncryptionRequest{State: true, KeyTypes: []string{"uuid"}}, false, "use --provisioner qemu"},
		{EncryptionRequest{Ephemeral: true}, true, "at least one"},
		{EncryptionRequest{State: true, KeyTypes: []string{"tpm"}}, true, "add --with-tpm2"},
		{EncryptionRequest{State: true, KeyTypes: []string{"uuid", "magic"}}, true, `"magic"`},
	} {
		if err := c.e.check(c.ownKernel, ""); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v, own kernel %v: %v, want %q", c.e, c.ownKernel, err, c.want)
		}
	}

	if err := (EncryptionRequest{KeyTypes: []string{"magic"}}).check(false, ""); err != nil {
		t.Errorf("key types without encryption: %v", err)
	}

	if err := (EncryptionRequest{State: true, KeyTypes: []string{"tpm"}}).check(true, TPM2); err != nil {
		t.Errorf("tpm keys with --with-tpm2: %v", err)
	}
}
