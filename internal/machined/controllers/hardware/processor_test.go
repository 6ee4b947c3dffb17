package hardware_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	hardwarectrl "github.com/talos-go/talos/internal/machined/controllers/hardware"
)

// cpuinfo is /proc/cpuinfo of sockets sockets of two cores with two threads each.
func cpuinfo(sockets int) string {
	cpu := func(n, socket, core int) string {
		return strings.Join([]string{
			"processor\t: " + string(rune('0'+n)),
			"vendor_id\t: GenuineIntel",
			"model name\t: Intel(R) Xeon(R) Gold 6130",
			"cpu MHz\t\t: 2100.000",
			"physical id\t: " + string(rune('0'+socket)),
			"core id\t\t: " + string(rune('0'+core)),
			"cpu cores\t: 2",
		}, "\n") + "\n\n"
	}

	var text string
	for n := range 4 * sockets {
		text += cpu(n, n/4, (n/2)%2)
	}

	return text
}

func TestParseCPUInfo(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpuinfo")
	if err := os.WriteFile(path, []byte(cpuinfo(2)), 0o644); err != nil {
		t.Fatal(err)
	}

	got, err := hardwarectrl.ParseCPUInfo(path)
	if err != nil {
		t.Fatal(err)
	}

	if len(got) != 2 {
		t.Fatalf("want 2 sockets, got %+v", got)
	}

	for i, s := range got {
		if s.Socket != "CPU "+string(rune('0'+i)) || s.Manufacturer != "GenuineIntel" || !strings.Contains(s.ProductName, "Gold 6130") ||
			s.BootSpeed != 2100 || s.CoreCount != 2 || s.ThreadCount != 4 {
			t.Fatalf("socket %d: %+v", i, s)
		}
	}

	if _, err := hardwarectrl.ParseCPUInfo(filepath.Join(t.TempDir(), "none")); err == nil {
		t.Fatal("a missing cpuinfo must be an error")
	}
}

func TestProcessor(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "proc"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "proc", "cpuinfo"), []byte(cpuinfo(2)), 0o644))

	env := ctest.Start(t, &hardwarectrl.ProcessorController{Root: root})

	// One resource per socket, with Talos's IDs.
	ctest.AssertResources(env, []resource.ID{"CPU_0", "CPU_1"}, func(r *hardware.Processor, a *assert.Assertions) {
		a.Equal("GenuineIntel", r.TypedSpec().Manufacturer)
		a.Equal(uint32(2), r.TypedSpec().CoreCount)
		a.Equal(uint32(4), r.TypedSpec().ThreadCount)
		a.Equal("CPU "+r.Metadata().ID()[len("CPU_"):], r.TypedSpec().Socket)
	})
	ctest.AssertIDs[*hardware.Processor](env, "CPU_0", "CPU_1")
}

func TestProcessorSingleSocket(t *testing.T) {
	// Virtual machines often list no physical id or core count: one socket, a core per thread.
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "proc"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "proc", "cpuinfo"),
		[]byte("processor\t: 0\nvendor_id\t: AuthenticAMD\n\nprocessor\t: 1\nvendor_id\t: AuthenticAMD\n"), 0o644))

	env := ctest.Start(t, &hardwarectrl.ProcessorController{Root: root})

	ctest.AssertResource(env, "CPU_0", func(r *hardware.Processor, a *assert.Assertions) {
		a.Equal("CPU 0", r.TypedSpec().Socket)
		a.Equal("AuthenticAMD", r.TypedSpec().Manufacturer)
		a.Equal(uint32(2), r.TypedSpec().ThreadCount)
		a.Equal(uint32(2), r.TypedSpec().CoreCount)
	})
	ctest.AssertIDs[*hardware.Processor](env, "CPU_0")
}
