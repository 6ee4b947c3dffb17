// Package uservolume provisions upstream's user-defined volumes on a metal node. User, swap and
// raw volumes (UserVolumeConfig, SwapVolumeConfig, RawVolumeConfig) are a GPT partition named
// u-, s- or r-<name> on the first disk the volume's disk selector (CEL) matches, in a LUKS2
// volume when the document encrypts it: XFS mounted at /var/mnt/<name>, swap space enabled, or
// left as it is. An existing volume (ExistingVolumeConfig) is a filesystem found by its volume
// selector, mounted at /var/mnt/<name>. A volume found on a disk is used as it is: its data is
// never formatted again.
package uservolume

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	blockpb "github.com/siderolabs/talos/pkg/machinery/api/resource/definitions/block"
	"github.com/siderolabs/talos/pkg/machinery/cel/celenv"
	"github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"golang.org/x/sys/unix"

	"github.com/talos-go/talos/internal/encryption"
	"github.com/talos-go/talos/internal/partition"
	"github.com/talos-go/talos/internal/udev"
)

// MountRoot is where user volumes are mounted, each in the folder of its name.
const MountRoot = "/var/mnt"

// Use is what a provisioned volume's partition holds.
type Use int

// The uses of the three documents that provision a partition.
const (
	UseXFS  Use = iota // UserVolumeConfig: XFS mounted at /var/mnt/<name>
	UseSwap            // SwapVolumeConfig: swap space, enabled
	UseRaw             // RawVolumeConfig: nothing, the partition is the workloads'
)

// Volume is a document that provisions a partition.
type Volume struct {
	Kind, Name   string // the document's kind and name, for messages
	Prefix       string // of its partition's name: u-, s-, r- (upstream's)
	Use          Use
	Filesystem   block.FilesystemType // a user volume's filesystem.type
	Provisioning config.VolumeProvisioningConfig
	Encryption   config.EncryptionConfig
}

// User, Swap and Raw are the documents' volumes.
func User(v config.UserVolumeConfig) Volume {
	return Volume{Kind: "UserVolumeConfig", Name: v.Name(), Prefix: "u-", Use: UseXFS, Filesystem: v.Filesystem().Type(), Provisioning: v.Provisioning(), Encryption: v.Encryption()}
}

func Swap(v config.SwapVolumeConfig) Volume {
	return Volume{Kind: "SwapVolumeConfig", Name: v.Name(), Prefix: "s-", Use: UseSwap, Provisioning: v.Provisioning(), Encryption: v.Encryption()}
}

func Raw(v config.RawVolumeConfig) Volume {
	return Volume{Kind: "RawVolumeConfig", Name: v.Name(), Prefix: "r-", Use: UseRaw, Provisioning: v.Provisioning(), Encryption: v.Encryption()}
}

// Volumes are the config's user, swap and raw volumes, in that order.
func Volumes(cfg config.Config) []Volume {
	var vs []Volume

	for _, v := range cfg.UserVolumeConfigs() {
		vs = append(vs, User(v))
	}

	for _, v := range cfg.SwapVolumeConfigs() {
		vs = append(vs, Swap(v))
	}

	for _, v := range cfg.RawVolumeConfigs() {
		vs = append(vs, Raw(v))
	}

	return vs
}

// PartitionName is the volume's GPT partition name, and its VolumeStatus's ID.
func (v Volume) PartitionName() string { return v.Prefix + v.Name }

func (v Volume) field() string { return v.Kind + " " + v.Name }

// Disk is a disk the selector is evaluated on.
type Disk struct {
	Name   string // vdb
	Spec   block.DiskSpec
	System bool // it holds the node's STATE
}

// Env is the machine's side of provisioning.
type Env struct {
	Sysfs, Dev string // "/sys", "/dev"
	MountRoot  string // MountRoot, or a test's folder
	Encryption encryption.Env
	Log        func(format string, args ...any)
	// LoadModule loads a kernel module (the kernel cannot: it has no modprobe to call), nil
	// where none are needed; EncryptionModules are what an encrypted volume needs loaded.
	LoadModule        func(name string) error
	EncryptionModules []string
}

// load loads the modules through env.LoadModule, when there is one.
func (env Env) load(names ...string) error {
	if env.LoadModule == nil {
		return nil
	}

	for _, m := range names {
		if err := env.LoadModule(m); err != nil {
			return fmt.Errorf("loading module %s: %w", m, err)
		}
	}

	return nil
}

// Result is a provisioned volume.
type Result struct {
	Partition  string // the partition's device: /dev/vdb1
	Device     string // what is mounted: the partition, or its opened LUKS2 volume
	Disk       string
	Index      int
	Size       uint64
	MountPoint string
	Encrypted  bool
	UUID       string // the filesystem's: a volume formatted again gets another
}

// Check refuses what this node cannot provision, naming the field: a user volume's filesystem
// other than XFS, a volume without a disk selector, encryption it cannot do.
func Check(v Volume) error {
	field := v.field()

	if _, ok := v.Provisioning.DiskSelector().Get(); !ok {
		return fmt.Errorf("%s: provisioning.diskSelector.match is required: name the disk, e.g. disk.transport == \"virtio\" && !system_disk", field)
	}

	if t := v.Filesystem; v.Use == UseXFS && t != block.FilesystemTypeXFS && t != block.FilesystemTypeNone {
		return fmt.Errorf("%s: filesystem.type %s: only xfs is supported", field, t)
	}

	_, err := encryption.FromEncryption(field+": encryption", v.Encryption)

	return err
}

// Matches tells whether the volume's selector picks the disk.
func Matches(v Volume, d Disk) (bool, error) {
	expr, ok := v.Provisioning.DiskSelector().Get()
	if !ok {
		return false, nil
	}

	// The selector is over the disk resource's protobuf form, as upstream's.
	pb, err := toProto[blockpb.DiskSpec](&d.Spec)
	if err != nil {
		return false, err
	}

	return expr.EvalBool(celenv.DiskLocator(), map[string]any{"disk": pb, "system_disk": d.System})
}

// Provision makes the volume ready: its partition found on a matching disk or made in the first
// one's free space, opened when encrypted, then as its use asks: formatted XFS when new and
// mounted, made swap space when new and enabled, or left as it is.
func Provision(ctx context.Context, v Volume, disks []Disk, env Env) (Result, error) {
	name := v.PartitionName()

	candidates, err := candidateDisks(v, disks)
	if err != nil {
		return Result{}, err
	}

	spec, err := encryption.FromEncryption(v.field()+": encryption", v.Encryption)
	if err != nil {
		return Result{}, err
	}

	var (
		res  Result
		errs []error
	)

	for _, d := range candidates {
		res, err = ensurePartition(d, name, v.Provisioning, env)
		if err == nil {
			break
		}

		errs = append(errs, fmt.Errorf("%s: %w", d.Name, err))
	}

	if res.Partition == "" {
		return Result{}, fmt.Errorf("%s: %w", v.field(), errors.Join(errs...))
	}

	res.Device = res.Partition

	if spec != nil {
		res.Encrypted = true

		if err = env.load(env.EncryptionModules...); err != nil {
			return Result{}, fmt.Errorf("%s: encryption: %w", v.field(), err)
		}

		if res.Device, err = openEncrypted(ctx, v.field(), name, res.Partition, spec, env); err != nil {
			return Result{}, err
		}
	}

	switch v.Use {
	case UseRaw:
		return res, nil
	case UseSwap:
		return res, swap(res.Device, name, &res, env)
	case UseXFS:
	}

	probed, err := udev.Probe(res.Device)
	if err != nil {
		return Result{}, err
	}

	// A partition is formatted only when nothing is on it: made here (its first MiB zeroed), or
	// a LUKS2 volume just made.
	switch {
	case probed.Filesystem == "" && isBlank(res.Device):
		env.Log("formatting %s (%s) as XFS", name, res.Device)

		if err = partition.FormatXFS(ctx, res.Device, name); err != nil {
			return Result{}, err
		}

		if probed, err = udev.Probe(res.Device); err != nil {
			return Result{}, err
		}
	case probed.Filesystem != "xfs":
		return Result{}, fmt.Errorf("%s: partition %s holds %q, not XFS: it is left alone (wipe it to have it formatted)", v.field(), res.Partition, probed.Filesystem)
	}

	res.UUID = probed.UUID
	res.MountPoint = filepath.Join(env.MountRoot, v.Name)
	if err = os.MkdirAll(res.MountPoint, 0o755); err != nil {
		return Result{}, err
	}

	if err = unix.Mount(res.Device, res.MountPoint, "xfs", unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil && !errors.Is(err, unix.EBUSY) {
		return Result{}, fmt.Errorf("mounting %s at %s: %w", res.Device, res.MountPoint, err)
	}

	return res, nil
}

// candidateDisks are the writable disks the volume's diskSelector matches.
func candidateDisks(v Volume, disks []Disk) ([]Disk, error) {
	var candidates []Disk

	for _, d := range disks {
		ok, err := Matches(v, d)
		if err != nil {
			return nil, fmt.Errorf("%s: provisioning.diskSelector.match: %w", v.field(), err)
		}

		if ok && !d.Spec.Readonly && !d.Spec.CDROM {
			candidates = append(candidates, d)
		}
	}

	if len(candidates) == 0 {
		return nil, fmt.Errorf("%s: no disk matches provisioning.diskSelector.match (%d disks seen)", v.field(), len(disks))
	}

	return candidates, nil
}

// openEncrypted opens the LUKS2 volume on the volume's partition, made first when the partition
// is blank, and returns the opened volume's device.
func openEncrypted(ctx context.Context, volume, name, part string, spec *encryption.Spec, env Env) (string, error) {
	enc := env.Encryption
	enc.Label = name

	dev := "/dev/mapper/" + encryption.MappedName(name)

	luks, err := encryption.IsLUKS(part)
	if err != nil {
		return "", err
	}

	switch {
	case exists(dev): // opened by an earlier try
	case !luks && isBlank(part):
		env.Log("encrypting %s (%s) with LUKS2", name, part)

		// A new volume reads as noise (zeros decrypted): its first MiB is zeroed through
		// it, so that it is blank, and formatted, below.
		if err = (encryption.Cryptsetup{}).Format(ctx, part, spec, enc); err == nil {
			err = zeroStart(dev)
		}
	default:
		_, err = encryption.Cryptsetup{}.Open(ctx, part, spec, enc)
	}

	if err != nil {
		return "", fmt.Errorf("%s: %w", volume, err)
	}

	return dev, nil
}

// ensurePartition finds the volume's partition on the disk, or adds it in the disk's free
// space (a new GPT on a blank disk), its first MiB zeroed.
func ensurePartition(d Disk, name string, p config.VolumeProvisioningConfig, env Env) (Result, error) {
	path := filepath.Join(env.Dev, d.Name)

	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return Result{}, err
	}
	defer f.Close()

	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return Result{}, err
	}

	ss, err := unix.IoctlGetInt(int(f.Fd()), unix.BLKSSZGET)
	if err != nil {
		return Result{}, err
	}

	parts, err := partition.Read(f)
	if err != nil {
		if !blank(f) {
			return Result{}, fmt.Errorf("%w, and the disk is not blank: it is left alone", err)
		}

		parts = nil
	}

	if i := slices.IndexFunc(parts, func(q partition.Placed) bool { return q.Name == name }); i >= 0 {
		dev, err := waitPartition(env, d.Name, parts[i].Number)

		return Result{Partition: dev, Disk: path, Index: parts[i].Number, Size: uint64(parts[i].Bytes())}, err
	}

	placed, err := place(parts, name, p, size, int64(ss))
	if err != nil {
		return Result{}, err
	}

	env.Log("adding partition %s to %s: %d MiB", name, path, placed.Bytes()/partition.MiB)

	zeros := make([]byte, partition.MiB)
	if _, err = f.WriteAt(zeros[:min(int64(len(zeros)), placed.Bytes())], placed.Offset()); err != nil {
		return Result{}, err
	}

	// The table is written anew; the MBR's boot code (GRUB's, on a system disk) is kept.
	if err = partition.WriteKeepingBootCode(f, size, append(parts, placed)); err != nil {
		return Result{}, err
	}

	// The kernel learns of the one new partition: the disk's others may be in use.
	if err = partition.AddToKernel(f, placed); err != nil {
		return Result{}, err
	}

	dev, err := waitPartition(env, d.Name, placed.Number)

	return Result{Partition: dev, Disk: path, Index: placed.Number, Size: uint64(placed.Bytes())}, err
}

// place puts the partition after the disk's last one: minSize at least, maxSize at most (the
// rest of the disk when it has none).
func place(parts []partition.Placed, name string, p config.VolumeProvisioningConfig, size, ss int64) (partition.Placed, error) {
	align := int64(partition.MiB) / ss
	first := align

	for _, q := range parts {
		first = max(first, (q.Last+1+align-1)/align*align)
	}

	lastUsable := partition.LastUsable(size, ss)
	free := (lastUsable + 1 - first) / align * align * ss

	minSize, maxSize := int64(p.MinSize().ValueOrZero()), int64(p.MaxSize().ValueOrZero())

	// maxSize bounds the volume, grow or not, as upstream's ("if not specified the volume can
	// grow to the size of the disk").
	want := free
	if maxSize > 0 {
		want = min(free, maxSize/ss/align*align*ss)
	}

	if want <= 0 || want < minSize {
		return partition.Placed{}, fmt.Errorf("%d MiB free, provisioning.minSize asks %d MiB", max(free, 0)/partition.MiB, minSize/partition.MiB)
	}

	number := 1
	for _, q := range parts {
		number = max(number, q.Number+1)
	}

	placed := partition.Placed{Partition: partition.Partition{Name: name, Type: partition.TypeLinux, Size: want}, Number: number,
		First: first, Last: first + want/ss - 1, GUID: uuid.New(), SectorSize: ss}

	return placed, nil
}

func zeroStart(dev string) error {
	f, err := os.OpenFile(dev, os.O_WRONLY, 0)
	if err != nil {
		return err
	}

	if _, err = f.Write(make([]byte, partition.MiB)); err == nil {
		err = f.Sync()
	}

	return errors.Join(err, f.Close())
}

func exists(path string) bool {
	_, err := os.Stat(path)

	return err == nil
}

// isBlank tells whether a device's first MiB is zeros.
func isBlank(dev string) bool {
	f, err := os.Open(dev)
	if err != nil {
		return false
	}
	defer f.Close()

	return blank(f)
}

// blank tells whether the disk's first MiB is zeros.
func blank(f *os.File) bool {
	b := make([]byte, partition.MiB)
	if _, err := f.ReadAt(b, 0); err != nil {
		return false
	}

	return !slices.ContainsFunc(b, func(c byte) bool { return c != 0 })
}

// waitPartition waits for partition n of the disk to have its device node.
func waitPartition(env Env, disk string, n int) (string, error) {
	name := disk
	if strings.IndexAny(disk[len(disk)-1:], "0123456789") == 0 {
		name += "p" // nvme0n1p1
	}

	name += fmt.Sprint(n)
	path := filepath.Join(env.Dev, name)

	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(env.Sysfs, "class", "block", name)); err == nil {
			if _, err = os.Stat(path); err == nil {
				return path, nil
			}
		}

		if time.Now().After(deadline) {
			return "", fmt.Errorf("partition %s did not appear", path)
		}
	}
}
