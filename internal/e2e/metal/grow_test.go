package metal

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/talos-go/talos/internal/testenv"
)

// VolumeConfig EPHEMERAL provisioning.grow, as upstream's: the node is installed on a 3 GiB
// disk, the machine is switched off and its disk made 4 GiB (a cloud disk resized), and on the
// next boot EPHEMERAL, the disk's last partition, takes the new space: its partition grows
// (get discoveredvolumes) and its XFS with it (the console says both).
func TestEphemeralGrowsWithItsDisk(t *testing.T) {
	_, cli, dir := qemuCluster(t, "qemu-grow")

	const cidr, gateway, node, name = "10.5.24.0/24", "10.5.24.1", "10.5.24.2", "qemu-grow-controlplane-1"

	patch := filepath.Join(t.TempDir(), "grow.yaml")
	if err := os.WriteFile(patch, []byte("apiVersion: v1alpha1\nkind: VolumeConfig\nname: EPHEMERAL\nprovisioning:\n  grow: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	cli.Must(t, oneNodeCluster("qemu-grow", cidr, gateway, "--config-patch", "@"+patch, "--with-uefi=false", "--disk-preallocate=false")...)
	t.Logf("installed and running from its disk in %s", time.Since(start).Round(100*time.Millisecond))

	waitBootedSlot(t, cli, node, "A", "vmlinuz")

	size := func() int64 {
		out := cli.Must(t, "-n", node, "get", "discoveredvolumes", "vda6", "-o", "jsonpath={.spec.size}")

		var n int64
		if _, err := fmt.Sscan(strings.TrimSpace(out), &n); err != nil {
			t.Fatalf("EPHEMERAL's size %q: %v", out, err)
		}

		return n
	}

	if label := cli.Must(t, "-n", node, "get", "discoveredvolumes", "vda6", "-o", "jsonpath={.spec.partition_label}"); strings.TrimSpace(label) != "EPHEMERAL" {
		t.Fatalf("vda6 is %q, not EPHEMERAL", label)
	}

	before := size()

	cutPowerAnd(t, cli, dir, name, func(state string) {
		if err := os.Truncate(filepath.Join(state, "disk.raw"), 4096<<20); err != nil {
			t.Fatal(err)
		}
	})

	var after int64

	testenv.WaitFor(t, "EPHEMERAL grown after the power cycle", 5*time.Minute, func() error {
		out, errOut, code := cli.Run(t, "-n", node, "get", "discoveredvolumes", "vda6", "-o", "jsonpath={.spec.size}")
		if code != 0 {
			return fmt.Errorf("exit %d: %s%s", code, out, errOut)
		}

		if _, err := fmt.Sscan(strings.TrimSpace(out), &after); err != nil || after <= before {
			return fmt.Errorf("EPHEMERAL is %s bytes, was %d", strings.TrimSpace(out), before)
		}

		return nil
	})

	// The disk grew by 1 GiB; the partition by that, less the MiB alignment at its end.
	if grown := after - before; grown < 1023<<20 || grown > 1026<<20 {
		t.Errorf("EPHEMERAL grew by %d bytes (%d → %d), want about 1 GiB", grown, before, after)
	}

	console, _ := os.ReadFile(filepath.Join(dir, name+".log"))
	for _, want := range []string{"EPHEMERAL's partition grown from", "EPHEMERAL grown to its whole partition"} {
		if !strings.Contains(string(console), want) {
			t.Errorf("the console does not say %q", want)
		}
	}
}
