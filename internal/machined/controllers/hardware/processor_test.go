package hardware_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/talos-go/talos/internal/machined/controllers/hardware"
)

func TestParseCPUInfo(t *testing.T) {
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

	// Two sockets of two cores with two threads each.
	var text string
	for n := range 8 {
		text += cpu(n, n/4, (n/2)%2)
	}

	path := filepath.Join(t.TempDir(), "cpuinfo")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}

	got, err := hardware.ParseCPUInfo(path)
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

	if _, err := hardware.ParseCPUInfo(filepath.Join(t.TempDir(), "none")); err == nil {
		t.Fatal("a missing cpuinfo must be an error")
	}
}
