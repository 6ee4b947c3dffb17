// Package encryption is LUKS2 encryption of a metal node's volumes (STATE and EPHEMERAL), as
// upstream's VolumeConfig encryption and machine.systemDiskEncryption describe it: the volume
// is formatted with cryptsetup, each configured key in its own key slot, and opened with the
// first key that works.
package encryption

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
)

// Spec is one volume's encryption: what the node formats it with and opens it by. A STATE
// spec is kept in META as JSON, since STATE (holding the config) is opened before the config is
// read.
type Spec struct {
	Cipher    string   `json:"cipher,omitempty"`
	KeySize   uint     `json:"keySize,omitempty"`
	BlockSize uint64   `json:"blockSize,omitempty"`
	Options   []string `json:"options,omitempty"`
	Keys      []Key    `json:"keys"`
}

// Key is one key slot's key: exactly one of Static, NodeID, KMS or TPM.
type Key struct {
	Slot   int    `json:"slot"`
	Static []byte `json:"static,omitempty"` // the passphrase itself
	NodeID bool   `json:"nodeID,omitempty"` // derived from the machine's SMBIOS UUID and the volume's label
	KMS    string `json:"kms,omitempty"`    // a KMS endpoint sealing a random key (grpc:// or https://)
	TPM    bool   `json:"tpm,omitempty"`    // a random key sealed to the machine's TPM and PCR 7
	// TPMCheckSecureBoot refuses to seal a TPM key when the firmware booted without Secure Boot.
	TPMCheckSecureBoot bool `json:"tpmCheckSecureBoot,omitempty"`
	// LockToState mixes STATE's random salt into the key: the volume opens only with this
	// node's STATE.
	LockToState bool `json:"lockToState,omitempty"`
}

// Kind names the key's type as the config does.
func (k Key) Kind() string {
	switch {
	case k.Static != nil:
		return "static"
	case k.NodeID:
		return "nodeID"
	case k.KMS != "":
		return "kms"
	case k.TPM:
		return "tpm"
	}

	return "none"
}

// perfOptions are the dm-crypt performance flags a spec's options may name (cryptsetup's
// --perf-* flags, applied when the volume is opened).
var perfOptions = []string{"no_read_workqueue", "no_write_workqueue", "same_cpu_crypt", "submit_from_crypt_cpus"}

// FromConfig is the encryption the config asks for the volume label (STATE, EPHEMERAL): its
// VolumeConfig document's, else machine.systemDiskEncryption's; nil when the volume is not
// encrypted. The field named in an error is the config's.
func FromConfig(cfg config.Config, label string) (*Spec, error) {
	if cfg == nil {
		return nil, nil
	}

	var enc config.EncryptionConfig

	field := fmt.Sprintf("VolumeConfig %s: encryption", label)

	if v, ok := cfg.Volumes().ByName(label); ok && v.Encryption() != nil && v.Encryption().Provider() != block.EncryptionProviderNone {
		enc = v.Encryption()
	} else if m := cfg.Machine(); m != nil && m.SystemDiskEncryption() != nil {
		if e := m.SystemDiskEncryption().Get(label); e != nil {
			enc = e
			field = fmt.Sprintf("machine.systemDiskEncryption.%s", map[string]string{"STATE": "state", "EPHEMERAL": "ephemeral"}[label])
		}
	}

	return FromEncryption(field, enc)
}

// FromEncryption is a config document's encryption (field names it in errors); nil when the
// document encrypts nothing.
func FromEncryption(field string, enc config.EncryptionConfig) (*Spec, error) {
	if enc == nil || (enc.Provider() == block.EncryptionProviderNone && len(enc.Keys()) == 0) {
		return nil, nil
	}

	if enc.Provider() != block.EncryptionProviderLUKS2 {
		return nil, fmt.Errorf("%s.provider %s: only luks2 is supported", field, enc.Provider())
	}

	s := &Spec{Cipher: enc.Cipher(), KeySize: enc.KeySize(), BlockSize: enc.BlockSize(), Options: enc.Options()}

	for _, o := range s.Options {
		if !slices.Contains(perfOptions, o) {
			return nil, fmt.Errorf("%s.options: %q is not one of %v", field, o, perfOptions)
		}
	}

	for _, k := range enc.Keys() {
		key := Key{Slot: k.Slot(), LockToState: k.LockToSTATE()}

		switch {
		case k.Static() != nil:
			key.Static = k.Static().Key()
		case k.NodeID() != nil:
			key.NodeID = true
		case k.KMS() != nil:
			key.KMS = k.KMS().Endpoint()
		case k.TPM() != nil:
			key.TPM, key.TPMCheckSecureBoot = true, k.TPM().CheckSecurebootOnEnroll()
		default:
			return nil, fmt.Errorf("%s.keys slot %d: name one of static, nodeID, kms or tpm", field, k.Slot())
		}

		s.Keys = append(s.Keys, key)
	}

	if len(s.Keys) == 0 {
		return nil, fmt.Errorf("%s.keys: give at least one key", field)
	}

	return s, nil
}

// Marshal is the spec as one line of JSON (a META value).
func (s *Spec) Marshal() (string, error) {
	b, err := json.Marshal(s)

	return string(b), err
}

// Unmarshal reads a spec Marshal wrote.
func Unmarshal(v string) (*Spec, error) {
	var s Spec
	if err := json.Unmarshal([]byte(v), &s); err != nil {
		return nil, fmt.Errorf("the encryption config in META: %w", err)
	}

	if len(s.Keys) == 0 {
		return nil, errors.New("the encryption config in META has no keys")
	}

	return &s, nil
}

// KeysOf are the spec's keys of a kind (Key.Kind); none for a nil spec.
func (s *Spec) KeysOf(kind string) []Key {
	if s == nil {
		return nil
	}

	var keys []Key

	for _, k := range s.Keys {
		if k.Kind() == kind {
			keys = append(keys, k)
		}
	}

	return keys
}
