package partition

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
)

// Device is a block device the kernel knows, from its sysfs uevent.
type Device struct {
	Name     string // e.g. vda3
	Disk     string // the whole disk's name for a partition (vda), else empty
	PartName string // the GPT partition name (PARTNAME)
	PartN    string // the partition number (PARTN)
}

// Path is the device node's path under /dev.
func (d Device) Path() string { return "/dev/" + d.Name }

// Devices lists the block devices in sysfs (/sys).
func Devices(sysfs string) ([]Device, error) {
	entries, err := os.ReadDir(filepath.Join(sysfs, "class", "block"))
	if err != nil {
		return nil, err
	}

	var devs []Device

	for _, e := range entries {
		dir := filepath.Join(sysfs, "class", "block", e.Name())
		u := readUevent(filepath.Join(dir, "uevent"))

		d := Device{Name: e.Name(), PartName: u["PARTNAME"], PartN: u["PARTN"]}
		if u["DEVTYPE"] == "partition" {
			if real, err := filepath.EvalSymlinks(dir); err == nil {
				d.Disk = filepath.Base(filepath.Dir(real))
			}
		}

		devs = append(devs, d)
	}

	return devs, nil
}

// Named returns the partitions of the first disk (in sysfs order) holding every one of the
// names, keyed by name; nil when no disk has them all.
func Named(devs []Device, names ...string) map[string]Device {
	byDisk := map[string]map[string]Device{}

	var disks []string

	for _, d := range devs {
		if d.Disk == "" || d.PartName == "" {
			continue
		}

		if byDisk[d.Disk] == nil {
			byDisk[d.Disk] = map[string]Device{}
			disks = append(disks, d.Disk)
		}

		byDisk[d.Disk][d.PartName] = d
	}

	for _, disk := range disks {
		found := byDisk[disk]

		all := true
		for _, n := range names {
			if _, ok := found[n]; !ok {
				all = false
			}
		}

		if all {
			return found
		}
	}

	return nil
}

func readUevent(path string) map[string]string {
	m := map[string]string{}

	f, err := os.Open(path)
	if err != nil {
		return m
	}
	defer f.Close()

	s := bufio.NewScanner(f)
	for s.Scan() {
		if k, v, ok := strings.Cut(s.Text(), "="); ok {
			m[k] = v
		}
	}

	return m
}

// OnDisk returns the named partitions of one disk (by its name, e.g. vda), keyed by name.
func OnDisk(devs []Device, disk string) map[string]Device {
	found := map[string]Device{}

	for _, d := range devs {
		if d.Disk == disk && d.PartName != "" {
			found[d.PartName] = d
		}
	}

	return found
}
