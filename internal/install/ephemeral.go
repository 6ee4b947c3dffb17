package install

import (
	"fmt"

	"github.com/siderolabs/talos/pkg/machinery/config/config"

	"github.com/talos-go/talos/internal/partition"
)

// EphemeralSize is the EPHEMERAL partition's size the config asks for (VolumeConfig EPHEMERAL's
// provisioning): at least Min and at most Max bytes of what the disk leaves (0: no bound).
type EphemeralSize struct {
	Min, Max int64
}

// EphemeralSizeFromConfig reads VolumeConfig EPHEMERAL's provisioning, refusing what the
// installer cannot do, naming the field: a disk selector (EPHEMERAL is on the install disk) and
// a maxSize below what the node needs. grow: true is the booting node's (metal.growEphemeral:
// the partition grows into a disk that grew, up to maxSize).
func EphemeralSizeFromConfig(cfg config.Config) (EphemeralSize, error) {
	if cfg == nil || cfg.Volumes() == nil {
		return EphemeralSize{}, nil
	}

	v, ok := cfg.Volumes().ByName(partition.Ephemeral)
	if !ok || v.Provisioning() == nil {
		return EphemeralSize{}, nil
	}

	p := v.Provisioning()
	field := "VolumeConfig EPHEMERAL: provisioning."

	if _, set := p.DiskSelector().Get(); set {
		return EphemeralSize{}, fmt.Errorf("%sdiskSelector: EPHEMERAL is made on the install disk; remove the selector and choose the disk with machine.install.disk or machine.install.diskSelector", field)
	}

	s := EphemeralSize{Min: int64(p.MinSize().ValueOrZero()), Max: int64(p.MaxSize().ValueOrZero())}

	if s.Max > 0 && s.Max < partition.MinEphemeral {
		return EphemeralSize{}, fmt.Errorf("%smaxSize %d MiB: EPHEMERAL holds etcd, containerd and the kubelet's data: give %d MiB or more", field, s.Max/partition.MiB, partition.MinEphemeral/partition.MiB)
	}

	if s.Max > 0 && s.Min > s.Max {
		return EphemeralSize{}, fmt.Errorf("%sminSize %d MiB is more than maxSize %d MiB", field, s.Min/partition.MiB, s.Max/partition.MiB)
	}

	return s, nil
}

// apply bounds the planned EPHEMERAL (the layout's last partition, which takes the rest of the
// disk) to at most Max, MiB-aligned, and refuses a disk that leaves it less than Min.
func (s EphemeralSize) apply(parts []partition.Placed) error {
	e := &parts[len(parts)-1]
	if e.Name != partition.Ephemeral {
		return fmt.Errorf("the layout's last partition is %s, not EPHEMERAL", e.Name)
	}

	if s.Min > 0 && e.Bytes() < s.Min {
		return fmt.Errorf("VolumeConfig EPHEMERAL: provisioning.minSize %d MiB: the disk leaves EPHEMERAL %d MiB; choose a bigger disk or a smaller minSize", s.Min/partition.MiB, e.Bytes()/partition.MiB)
	}

	ss := e.Bytes() / (e.Last - e.First + 1)
	if s.Max > 0 && e.Bytes() > s.Max {
		e.Last = e.First + s.Max/partition.MiB*partition.MiB/ss - 1
		e.Size = e.Bytes()
	}

	return nil
}
