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

// EncryptionRequest is --encrypt-state, --encrypt-ephemeral and --disk-encryption-key-types.
type EncryptionRequest struct {
	State, Ephemeral bool
	KeyTypes         []string // one key slot each, in order
}

func (e EncryptionRequest) enabled() bool { return e.State || e.Ephemeral }

func (e EncryptionRequest) usesKMS() bool { return e.enabled() && slices.Contains(e.KeyTypes, KeyTypeKMS) }

func (e EncryptionRequest) check(provisioner string) error {
	if !e.enabled() {
		return nil
	}

	if provisioner != ProvisionerQEMU {
		return errors.New("--encrypt-state and --encrypt-ephemeral encrypt an installed disk's partitions, which only qemu nodes have: use --provisioner qemu")
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

// patch is the encryption as upstream's cluster create writes it: a VolumeConfig document per
// encrypted volume, LUKS2, one key slot per key type; EPHEMERAL's keys locked to STATE. KMS keys
// are sealed by the network process's KMS on the gateway.
func (e EncryptionRequest) patch(cidr netip.Prefix) string {
	var docs []string

	for _, v := range []struct {
		label string
		on    bool
	}{{"STATE", e.State}, {"EPHEMERAL", e.Ephemeral}} {
		if !v.on {
			continue
		}

		var keys strings.Builder

		for slot, t := range e.KeyTypes {
			fmt.Fprintf(&keys, "    - slot: %d\n", slot)

			switch t {
			case KeyTypeUUID:
				keys.WriteString("      nodeID: {}\n")
			case KeyTypeKMS:
				fmt.Fprintf(&keys, "      kms:\n        endpoint: grpc://%s\n", netip.AddrPortFrom(gateway(cidr).Addr(), qemu.KMSPort))
			}

			if v.label != "STATE" {
				keys.WriteString("      lockToState: true\n")
			}
		}

		docs = append(docs, fmt.Sprintf("apiVersion: v1alpha1\nkind: VolumeConfig\nname: %s\nencryption:\n  provider: luks2\n  keys:\n%s", v.label, keys.String()))
	}

	return strings.Join(docs, "---\n")
}
