package provision

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/talos-go/talos/internal/provision/qemu/vm"
)

// The key types of --disk-encryption-key-types, as upstream's.
const (
	KeyTypeUUID = "uuid" // nodeID: derived from the VM's SMBIOS UUID
	KeyTypeKMS  = "kms"  // a random key sealed by the KMS the network process serves
	KeyTypeTPM  = "tpm"  // a random key sealed to the node's TPM 2.0 (--with-tpm2)
)

// EncryptionRequest is --encrypt-state, --encrypt-ephemeral, --encrypt-user-volumes and
// --disk-encryption-key-types.
type EncryptionRequest struct {
	State, Ephemeral, UserVolumes bool
	KeyTypes                      []string // one key slot each, in order
}

func (e EncryptionRequest) enabled() bool { return e.State || e.Ephemeral || e.UserVolumes }

// UsesKMS tells whether a key is sealed by the cluster's KMS.
func (e EncryptionRequest) UsesKMS() bool {
	return e.enabled() && slices.Contains(e.KeyTypes, KeyTypeKMS)
}

// check refuses flags the nodes cannot honour: the disk's partitions are encrypted by nodes with
// their own kernel; tpm is the nodes' TPM version ("" for none).
func (e EncryptionRequest) check(ownKernel bool, tpm string) error {
	if !e.enabled() {
		return nil
	}

	if !ownKernel {
		return errors.New("--encrypt-state, --encrypt-ephemeral and --encrypt-user-volumes encrypt an installed disk's partitions, which only qemu nodes have: use --provisioner qemu")
	}

	if len(e.KeyTypes) == 0 {
		return errors.New("--disk-encryption-key-types: give at least one of uuid, kms, tpm")
	}

	for _, t := range e.KeyTypes {
		switch t {
		case KeyTypeUUID, KeyTypeKMS:
		case KeyTypeTPM:
			if tpm != TPM2 {
				return errors.New("--disk-encryption-key-types tpm seals the keys to each node's TPM 2.0: add --with-tpm2")
			}
		default:
			return fmt.Errorf("--disk-encryption-key-types %q: the key types are uuid, kms and tpm", t)
		}
	}

	return nil
}

// kmsEndpoint is where the network process's KMS listens: the gateway, upstream's port.
func kmsEndpoint(cidr netip.Prefix) string {
	return "grpc://" + netip.AddrPortFrom(Gateway(cidr).Addr(), vm.KMSPort).String()
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
		case KeyTypeTPM:
			keys.WriteString("      tpm: {}\n") // the nodes boot without Secure Boot: no check on enroll
		}

		if lockToState {
			keys.WriteString("      lockToState: true\n")
		}
	}

	return keys.String()
}
