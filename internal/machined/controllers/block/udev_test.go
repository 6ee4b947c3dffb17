package block_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	blockres "github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/stretchr/testify/assert"

	"github.com/talos-go/talos/internal/machined/controllers/block"
	"github.com/talos-go/talos/internal/machined/controllers/ctest"
)

// udevd on this machine's kernel: a loop device with an XFS filesystem is published as a
// Device, probed into a DiscoveredVolume with its label, and linked by label; a uevent on it
// bumps its generation.
func TestUdevOnThisKernel(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root for a loop device")
	}

	img := filepath.Join(t.TempDir(), "xfs.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}

	if err := os.Truncate(img, 320<<20); err != nil {
		t.Fatal(err)
	}

	if out, err := exec.Command("mkfs.xfs", "-q", "-L", "UDEVTEST", img).CombinedOutput(); err != nil {
		t.Skipf("mkfs.xfs: %v: %s", err, out)
	}

	out, err := exec.Command("losetup", "--find", "--show", img).CombinedOutput()
	if err != nil {
		t.Skipf("no loop device: %v: %s", err, out)
	}

	loop := filepath.Base(strings.TrimSpace(string(out)))
	t.Cleanup(func() { exec.Command("losetup", "-d", "/dev/"+loop).Run() })

	links := t.TempDir()
	env := ctest.Start(t, &block.UdevController{Sysfs: "/sys"}, &block.DiscoveredVolumesController{Sysfs: "/sys", Dev: "/dev", Links: links})

	ctest.AssertResource(env, loop, func(r *blockres.Device, a *assert.Assertions) {
		a.Equal("disk", r.TypedSpec().Type)
		a.Equal(7, r.TypedSpec().Major)
	})

	ctest.AssertResource(env, loop, func(r *blockres.DiscoveredVolume, a *assert.Assertions) {
		a.Equal("xfs", r.TypedSpec().Name)
		a.Equal("UDEVTEST", r.TypedSpec().Label)
		a.Equal(uint64(320<<20), r.TypedSpec().Size)
		a.Equal("/dev/"+loop, r.TypedSpec().DevPath)
	})

	ctest.AssertResource(env, loop, func(r *blockres.Symlink, a *assert.Assertions) {
		a.Contains(r.TypedSpec().Paths, "/dev/disk/by-label/UDEVTEST")
	})

	if target, err := os.Readlink(filepath.Join(links, "disk/by-label/UDEVTEST")); err != nil || target != "../../"+loop {
		t.Errorf("by-label/UDEVTEST → %q, %v", target, err)
	}

	// The kernel sends a change event for the device when asked; udevd counts it.
	if err = os.WriteFile(filepath.Join("/sys/class/block", loop, "uevent"), []byte("change"), 0o200); err != nil {
		t.Fatal(err)
	}

	ctest.AssertResource(env, loop, func(r *blockres.Device, a *assert.Assertions) {
		a.GreaterOrEqual(r.TypedSpec().Generation, 1)
	})
}
