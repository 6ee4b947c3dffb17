package uservolume

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/siderolabs/protoenc"
	blockpb "github.com/siderolabs/talos/pkg/machinery/api/resource/definitions/block"
	"github.com/siderolabs/talos/pkg/machinery/cel/celenv"
	"github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
)

// ExistingPrefix names an existing volume's VolumeStatus (upstream's e-<name>).
const ExistingPrefix = "e-"

// mountable are the filesystems an existing volume may hold, each with the modules the node's
// kernel mounts it with (FAT with its default code page and character set).
var mountable = map[string][]string{"xfs": {"xfs"}, "vfat": {"vfat", "nls_cp437", "nls_ascii"}}

// Found is a discovered volume and its disk (a partition's parent, or the volume itself), what
// an existing volume's selector is evaluated on.
type Found struct {
	Volume block.DiscoveredVolumeSpec
	Disk   block.DiskSpec
}

// MatchExisting is the first volume (in the order given) holding a filesystem that the
// document's discovery.volumeSelector.match picks.
func MatchExisting(v config.ExistingVolumeConfig, vols []Found) (Found, error) {
	field := "ExistingVolumeConfig " + v.Name() + ": discovery.volumeSelector.match"

	for _, f := range vols {
		if _, ok := mountable[f.Volume.Name]; !ok {
			continue
		}

		vol, err := toProto[blockpb.DiscoveredVolumeSpec](&f.Volume)
		if err != nil {
			return Found{}, err
		}

		disk, err := toProto[blockpb.DiskSpec](&f.Disk)
		if err != nil {
			return Found{}, err
		}

		ok, err := v.VolumeDiscovery().VolumeSelector().EvalBool(celenv.VolumeLocator(), map[string]any{"volume": vol, "disk": disk})
		if err != nil {
			return Found{}, fmt.Errorf("%s: %w", field, err)
		}

		if ok {
			return f, nil
		}
	}

	return Found{}, fmt.Errorf("%s: no volume holding xfs or vfat matches (%d volumes seen)", field, len(vols))
}

// MountExisting mounts the found volume as it is at the volume's folder under env.MountRoot,
// read-only when mount.readOnly says so, and returns the folder. A folder with something
// mounted on it already (an earlier try) is left as it is.
func MountExisting(v config.ExistingVolumeConfig, f Found, env Env) (string, error) {
	field := "ExistingVolumeConfig " + v.Name()

	target := filepath.Join(env.MountRoot, v.Name())
	if err := os.MkdirAll(target, 0o755); err != nil {
		return "", err
	}

	if mounted(target) {
		return target, nil
	}

	if err := env.load(mountable[f.Volume.Name]...); err != nil {
		return "", fmt.Errorf("%s: %w", field, err)
	}

	flags := uintptr(unix.MS_NOSUID | unix.MS_NODEV)
	if v.Mount().ReadOnly() {
		flags |= unix.MS_RDONLY
	}

	if err := unix.Mount(f.Volume.DevPath, target, f.Volume.Name, flags, ""); err != nil {
		msg := ""
		if errors.Is(err, unix.EBUSY) {
			msg = " (mounted elsewhere with the other mount.readOnly: give the same)"
		}

		return "", fmt.Errorf("%s: mounting %s (%s) at %s: %w%s", field, f.Volume.DevPath, f.Volume.Name, target, err, msg)
	}

	return target, nil
}

// mounted tells whether a folder is a mount point: on another device than its parent.
func mounted(dir string) bool {
	var self, parent unix.Stat_t
	if unix.Stat(dir, &self) != nil || unix.Stat(filepath.Dir(dir), &parent) != nil {
		return false
	}

	return self.Dev != parent.Dev
}

// toProto is a resource spec in its protobuf form, what upstream's CEL selectors read.
func toProto[P any, PP interface {
	*P
	proto.Message
}](spec any) (PP, error) {
	raw, err := protoenc.Marshal(spec)
	if err != nil {
		return nil, err
	}

	pb := PP(new(P))

	return pb, proto.Unmarshal(raw, pb)
}
