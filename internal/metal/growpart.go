package metal

import (
	"os"
	"path/filepath"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"

	"github.com/talos-go/talos/internal/partition"
)

// growEphemeral grows EPHEMERAL's partition into the free space after it when the config on
// STATE asks (VolumeConfig EPHEMERAL provisioning.grow, up to its maxSize), as upstream's
// volumes grow: a disk resized since the install (a cloud disk, a disk image written to a
// bigger disk). It runs before EPHEMERAL is opened and mounted, which then grow its LUKS2
// mapping and XFS to the partition (growXFS). Any failure leaves EPHEMERAL as it was, and says
// why on the console: the node boots either way.
func growEphemeral(stateDir string, dev partition.Device) {
	cfg, err := configloader.NewFromFile(filepath.Join(stateDir, "config.yaml"))
	if err != nil || cfg.Volumes() == nil {
		return // no config yet (maintenance mode): nothing asks to grow
	}

	v, ok := cfg.Volumes().ByName(partition.Ephemeral)
	if !ok || v.Provisioning() == nil || !v.Provisioning().Grow().ValueOrZero() {
		return
	}

	disk, err := os.OpenFile("/dev/"+dev.Disk, os.O_RDWR, 0)
	if err != nil {
		log("EPHEMERAL keeps its partition's size (provisioning.grow): %v", err)

		return
	}
	defer disk.Close()

	before, after, err := partition.GrowLast(disk, partition.Ephemeral, int64(v.Provisioning().MaxSize().ValueOrZero()))

	switch {
	case err != nil:
		log("EPHEMERAL keeps its partition's size (provisioning.grow): %v", err)
	case after > before:
		log("EPHEMERAL's partition grown from %d MiB to %d MiB (provisioning.grow)", before/partition.MiB, after/partition.MiB)
	}
}
