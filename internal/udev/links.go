package udev

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Links are the /dev/disk/by-* names of a volume, relative to /dev (the links udev's
// persistent-storage rules make, for the names these probes know): by-partlabel, by-label,
// by-uuid, by-partuuid, and by-id for virtio disks with a serial and NVMe namespaces.
func Links(v Volume, sysfs string) []string {
	var links []string

	add := func(kind, name string) {
		if name != "" && !strings.ContainsAny(name, "/\x00") {
			links = append(links, filepath.Join("disk", kind, name))
		}
	}

	add("by-partlabel", v.PartitionLabel)
	add("by-partuuid", v.PartitionUUID)

	if v.Filesystem != "gpt" {
		add("by-label", v.Label)
		add("by-uuid", v.UUID)
	}

	disk := v.Name
	if v.Parent != "" {
		disk = v.Parent
	}

	if id := diskID(sysfs, disk); id != "" {
		if v.Parent != "" {
			id += "-part" + strconv.FormatUint(uint64(v.PartitionIndex), 10)
		}

		add("by-id", id)
	}

	slices.Sort(links)

	return links
}

// diskID is a disk's by-id name: virtio-<serial>, nvme-<model>_<serial>.
func diskID(sysfs, disk string) string {
	dir := filepath.Join(sysfs, "class", "block", disk)
	clean := func(s string) string { return strings.Join(strings.Fields(s), "_") }

	switch {
	case strings.HasPrefix(disk, "vd"):
		if serial := clean(readTrim(filepath.Join(dir, "serial"))); serial != "" {
			return "virtio-" + serial
		}
	case strings.HasPrefix(disk, "nvme"):
		model, serial := clean(readTrim(filepath.Join(dir, "device", "model"))), clean(readTrim(filepath.Join(dir, "device", "serial")))
		if model != "" && serial != "" {
			return "nvme-" + model + "_" + serial
		}
	}

	return ""
}

// SyncLinks makes the symlinks under dev (/dev) match want (link → device name, e.g.
// disk/by-partlabel/STATE → vda5): missing ones are made, wrong ones replaced, stale ones under
// dev/disk removed.
func SyncLinks(dev string, want map[string]string) error {
	var errs []error

	for link, name := range want {
		path := filepath.Join(dev, link)
		target, err := filepath.Rel(filepath.Dir(path), filepath.Join(dev, name))
		if err != nil {
			return err
		}

		if cur, err := os.Readlink(path); err == nil && cur == target {
			continue
		}

		if err = os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			errs = append(errs, err)

			continue
		}

		os.Remove(path)

		if err = os.Symlink(target, path); err != nil {
			errs = append(errs, err)
		}
	}

	// Stale links go through a root at dev: a link is removed, never what it points to.
	root, err := os.OpenRoot(dev)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	defer root.Close()

	err = fs.WalkDir(root.FS(), "disk", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&fs.ModeSymlink == 0 {
			return nil //nolint:nilerr // no folder yet: nothing stale
		}

		if _, ok := want[p]; !ok {
			return root.Remove(p)
		}

		return nil
	})

	return errors.Join(append(errs, err)...)
}
