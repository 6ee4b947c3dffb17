package metal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"golang.org/x/sys/unix"

	"github.com/talos-go/talos/internal/container"
	"github.com/talos-go/talos/internal/encryption"
	"github.com/talos-go/talos/internal/meta"
	"github.com/talos-go/talos/internal/partition"
)

// EncryptionModules are what dm-crypt and cryptsetup use on the nodes' kernel: the target, the
// XTS mode of its default cipher (aes-xts-plain64, which instantiates xts(ecb(aes))) and the
// kernel crypto API's socket cryptsetup encrypts its key slots with. The kernel cannot load
// them itself (there is no modprobe for it to call).
var EncryptionModules = []string{"dm_crypt", "xts", "ecb", "algif_skcipher"}

// openTimeout bounds opening a volume: a KMS key may wait for the KMS.
const openTimeout = 3 * time.Minute

// SystemUUID is the machine's SMBIOS UUID, what nodeID keys derive from.
func SystemUUID() string {
	b, _ := os.ReadFile("/sys/class/dmi/id/product_uuid")

	return strings.TrimSpace(string(b))
}

// openEncrypted returns the device to mount for a partition: the partition itself, or, when
// it holds a LUKS volume, the volume opened (STATE with the encryption config in META,
// EPHEMERAL with the one in the config on STATE, which is mounted by then).
func openEncrypted(mods *Modules, label, dev, metaDev string) (string, error) {
	luks, err := encryption.IsLUKS(dev)
	if err != nil || !luks {
		return dev, err
	}

	var spec *encryption.Spec

	env := encryption.Env{Label: label, NodeUUID: SystemUUID(), PCRSigning: bootedPCRSigning}

	switch label {
	case partition.State:
		v, err := meta.OpenPartition(metaDev).Get(meta.StateEncryption)
		if err != nil {
			return "", err
		}

		if v == "" {
			return "", errors.New("STATE is encrypted, and META holds no encryption config for it: the disk was not installed by this system, or its META is damaged")
		}

		if spec, err = encryption.Unmarshal(v); err != nil {
			return "", err
		}
	default:
		state := filepath.Join(diskDir, partition.State)

		cfg, err := configloader.NewFromFile(filepath.Join(state, "config.yaml"))
		if err != nil {
			return "", fmt.Errorf("%s is encrypted, and the config on STATE does not load: %w", label, err)
		}

		if spec, err = encryption.FromConfig(cfg, label); err != nil {
			return "", err
		}

		if spec == nil {
			return "", fmt.Errorf("%s is encrypted, and the config names no encryption for it: add its keys back to the config", label)
		}

		env.Salt, _ = os.ReadFile(filepath.Join(state, encryption.SaltFile)) // absent: only keys locked to STATE fail
	}

	for _, m := range EncryptionModules {
		if err = mods.Load(m); err != nil {
			return "", err
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), openTimeout)
	defer cancel()

	var key encryption.Key

	err = withImage(func(root string) (err error) {
		key, err = encryption.Cryptsetup{Root: root}.Open(ctx, dev, spec, env)

		return err
	})
	if err != nil {
		return "", err
	}

	log("%s: LUKS2 volume opened with key slot %d (%s)", label, key.Slot, key.Kind())

	return "/dev/mapper/" + encryption.MappedName(label), nil
}

// withImage runs fn with the node image mounted at a folder, with /dev, /proc and /sys in it:
// the boot stage runs the image's programs (cryptsetup) chrooted there.
func withImage(fn func(root string) error) error {
	root := "/image" // in InitramfsAdded
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}

	if err := container.MountImage(InitramfsImage, root); err != nil {
		return err
	}

	mounted := []string{root}

	defer func() {
		for i := len(mounted) - 1; i >= 0; i-- {
			unix.Unmount(mounted[i], unix.MNT_DETACH) //nolint:errcheck // best effort: nothing uses them after
		}
	}()

	for _, m := range []struct{ src, dir, fs string }{{"devtmpfs", "dev", "devtmpfs"}, {"proc", "proc", "proc"}, {"sysfs", "sys", "sysfs"}} {
		dir := filepath.Join(root, m.dir)
		if err := unix.Mount(m.src, dir, m.fs, unix.MS_NOSUID, ""); err != nil {
			return fmt.Errorf("mounting %s: %w", dir, err)
		}

		mounted = append(mounted, dir)
	}

	return fn(root)
}
