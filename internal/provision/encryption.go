package provision

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/talos-go/talos/internal/qemu"
)

// The key types of --disk-encryption-key-types, as upstream's.
const (
	KeyTypeUUID = "uuid" // nodeID: derived from the VM's SMBIOS UUID
	KeyTypeKMS  = "kms"  // a random key sealed by the KMS the network process serves
	KeyTypeTPM  = "tpm"
)

// EncryptionRequest is --encrypt-state, --encrypt-ephemeral, --encrypt-user-volumes and
// --disk-encryption-key-types.
type EncryptionRequest struct {
	State, Ephemeral, UserVolumes bool
	KeyTypes                      []string // one key slot each, in order
}

func (e EncryptionRequest) enabled() bool { return e.State || e.Ephemeral || e.UserVolumes }

func (e EncryptionRequest) usesKMS() bool {
	return e.enabled() && slices.Contains(e.KeyTypes, KeyTypeKMS)
}

func (e EncryptionRequest) check(provisioner string) error {
	if !e.enabled() {
		return nil
	}

	if provisioner != ProvisionerQEMU {
		return errors.New("--encrypt-state, --encrypt-ephemeral and --encrypt-user-volumes encrypt an installed disk's partitions, which only qemu nodes have: use --provisioner qemu")
	}

	if len(e.KeyTypes) == 0 {
		return errors.New("--disk-encryption-key-types: give at least one of uuid, kms")
	}

	for _, t := range e.KeyTypes {
		switch t {
		case KeyTypeUUID, KeyTypeKMS:
		case KeyTypeTPM:
			return errors.New("--disk-encryption-key-types tpm: the nodes do not seal keys to a TPM yet: use uuid or kms")
		default:
			return fmt.Errorf("--disk-encryption-key-types %q: the key types are uuid and kms", t)
		}
	}

	return nil
}

// kmsEndpoint is where the network process's KMS listens: the gateway, upstream's port.
func kmsEndpoint(cidr netip.Prefix) string {
	return "grpc://" + netip.AddrPortFrom(gateway(cidr).Addr(), qemu.KMSPort).String()
}

// patch is the system volumes' encryption as upstream's cluster create writes it: a
// VolumeConfig document per encrypted volume, LUKS2, one key slot per key type; EPHEMERAL's keys
// locked to STATE.
func (e EncryptionRequest) patch(cidr netip.Prefix) string {
	var docs []string

	for _, v := range []struct {
		label string
		on    bool
	}{{"STATE", e.State}, {"EPHEMERAL", e.Ephemeral}} {
		if v.on {
			docs = append(docs, fmt.Sprintf("apiVersion: v1alpha1\nkind: VolumeConfig\nname: %s\nencryption:\n  provider: luks2\n  keys:\n%s",
				v.label, e.keysYAML(kmsEndpoint(cidr), v.label != "STATE")))
		}
	}

	return strings.Join(docs, "---\n")
}

// keysYAML is the encryption's keys list: a slot per key type, KMS keys sealed at kms.
func (e EncryptionRequest) keysYAML(kms string, lockToState bool) string {
	var keys strings.Builder

	for slot, t := range e.KeyTypes {
		fmt.Fprintf(&keys, "    - slot: %d\n", slot)

		switch t {
		case KeyTypeUUID:
			keys.WriteString("      nodeID: {}\n")
		case KeyTypeKMS:
			fmt.Fprintf(&keys, "      kms:\n        endpoint: %s\n", kms)
		}

		if lockToState {
			keys.WriteString("      lockToState: true\n")
		}
	}

	return keys.String()
}
