package install

import (
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"

	"github.com/talos-go/talos/internal/partition"
)

func ephemeralSize(t *testing.T, provisioning string) (EphemeralSize, error) {
	t.Helper()

	cfg, err := configloader.NewFromBytes([]byte("apiVersion: v1alpha1\nkind: VolumeConfig\nname: EPHEMERAL\nprovisioning:\n" + provisioning))
	if err != nil {
		t.Fatal(err)
	}

	return EphemeralSizeFromConfig(cfg)
}

// VolumeConfig EPHEMERAL's minSize and maxSize bound the partition the installer makes; what it
// cannot do (another disk, too small a maximum) is refused naming the field; grow: true passes
// (the booting node grows the partition: metal.growEphemeral).
func TestEphemeralSize(t *testing.T) {
	s, err := ephemeralSize(t, "  minSize: 1GiB\n  maxSize: 2GiB\n  grow: false\n")
	if err != nil || s != (EphemeralSize{Min: 1 << 30, Max: 2 << 30}) {
		t.Fatalf("%+v %v", s, err)
	}

	const disk = 6 << 30

	parts, err := partition.PlanSectors(partition.Layout, disk, 512)
	if err != nil {
		t.Fatal(err)
	}

	rest := parts[len(parts)-1].Bytes()

	if err = s.apply(parts); err != nil {
		t.Fatal(err)
	}

	if e := parts[len(parts)-1]; e.Bytes() != 2<<30 || e.Size != 2<<30 || e.First != parts[len(parts)-2].Last+1 {
		t.Errorf("EPHEMERAL %+v: %d bytes, want 2 GiB after STATE", e, e.Bytes())
	}

	// No maxSize: the rest of the disk, as before.
	parts, _ = partition.PlanSectors(partition.Layout, disk, 512)
	if err = (EphemeralSize{Min: 1 << 30}).apply(parts); err != nil || parts[len(parts)-1].Bytes() != rest {
		t.Errorf("no maxSize: %d bytes, want %d: %v", parts[len(parts)-1].Bytes(), rest, err)
	}

	if err = (EphemeralSize{Min: 8 << 30}).apply(parts); err == nil || !strings.Contains(err.Error(), "provisioning.minSize 8192 MiB: the disk leaves EPHEMERAL") {
		t.Errorf("minSize above the disk: %v", err)
	}

	if s, err = ephemeralSize(t, "  maxSize: 4GiB\n  grow: true\n"); err != nil || s.Max != 4<<30 {
		t.Errorf("grow: true with maxSize: %+v %v", s, err)
	}

	for provisioning, want := range map[string]string{
		"  diskSelector:\n    match: disk.transport == \"nvme\"\n": "provisioning.diskSelector: EPHEMERAL is made on the install disk",
		"  maxSize: 100MiB\n":                "provisioning.maxSize 100 MiB: EPHEMERAL holds etcd",
		"  minSize: 3GiB\n  maxSize: 2GiB\n": "minSize 3072 MiB is more than maxSize 2048 MiB",
	} {
		if _, err = ephemeralSize(t, provisioning); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "VolumeConfig EPHEMERAL") {
			t.Errorf("%s: %v, want %q", provisioning, err, want)
		}
	}
}
