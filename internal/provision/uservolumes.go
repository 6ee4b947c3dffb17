package provision

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/dustin/go-humanize"
)

// UserVolume is one volume of --user-volumes.
type UserVolume struct {
	Name string
	Size string // as given: 1GiB, 500MiB
	MiB  uint64
}

var volumeName = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$`)

// ParseUserVolumes reads --user-volumes: each value is one more disk of every node, holding the
// volumes it names (name1:size1:name2:size2...), as upstream's.
func ParseUserVolumes(values []string) ([][]UserVolume, error) {
	var disks [][]UserVolume

	seen := map[string]bool{}

	for _, v := range values {
		fields := strings.Split(v, ":")
		if len(fields)%2 != 0 {
			return nil, fmt.Errorf("--user-volumes %q: give name:size pairs, e.g. data:1GiB or data:1GiB:logs:500MiB", v)
		}

		var disk []UserVolume

		for i := 0; i < len(fields); i += 2 {
			name, size := fields[i], fields[i+1]
			if !volumeName.MatchString(name) || seen[name] {
				return nil, fmt.Errorf("--user-volumes %q: volume name %q: use lowercase letters, digits and dashes, each name once", v, name)
			}

			seen[name] = true

			b, err := humanize.ParseBytes(size)
			if err != nil || b < 1<<20 {
				return nil, fmt.Errorf("--user-volumes %q: volume %s size %q: give a size of 1MiB or more, like 500MiB or 2GiB", v, name, size)
			}

			disk = append(disk, UserVolume{Name: name, Size: size, MiB: (b + 1<<20 - 1) >> 20})
		}

		disks = append(disks, disk)
	}

	return disks, nil
}

// UserVolumeSerial names user volume disk i (0-based): its serial, and so its
// /dev/disk/by-id/virtio-<serial> link the volumes' disk selector names.
func UserVolumeSerial(i int) string { return fmt.Sprintf("uservol-%d", i+1) }

// UserVolumeDiskMiB is the disk for the volumes: theirs, the first MiB, a MiB of alignment
// each and one for the backup table.
func UserVolumeDiskMiB(disk []UserVolume) int64 {
	n := int64(2 + len(disk))
	for _, v := range disk {
		n += int64(v.MiB)
	}

	return n
}

// userVolumesPatch is a UserVolumeConfig per volume, as upstream's: on its disk (by its by-id
// link), of exactly its size, encrypted with e's key types when --encrypt-user-volumes.
func userVolumesPatch(disks [][]UserVolume, encrypt bool, e EncryptionRequest, kmsEndpoint string) string {
	var docs []string

	for i, disk := range disks {
		for _, v := range disk {
			doc := fmt.Sprintf("apiVersion: v1alpha1\nkind: UserVolumeConfig\nname: %s\nprovisioning:\n  diskSelector:\n    match: \"'/dev/disk/by-id/virtio-%s' in disk.symlinks\"\n  minSize: %s\n  maxSize: %s\n",
				v.Name, UserVolumeSerial(i), v.Size, v.Size)

			if encrypt {
				doc += "encryption:\n  provider: luks2\n  keys:\n" + e.keysYAML(kmsEndpoint, false)
			}

			docs = append(docs, doc)
		}
	}

	return strings.Join(docs, "---\n")
}
