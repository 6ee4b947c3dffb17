package metal

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/talos-go/talos/internal/testenv"
)

// assertCgroupLayout checks a 1-CPU metal node's cgroups through `talosctl cgroups`: upstream's
// tree (init, system with runtime/apid/trustd, podruntime with etcd/kubelet, and the kubepods
// kubelet makes) with upstream's memory.min/low/max and cpu.weight (millicores capped at the
// node's one CPU: 39 a core; etcd's 2048 CPU shares are not capped: 79).
func assertCgroupLayout(t *testing.T, cli testenv.CLI, node string) {
	t.Helper()

	// A row of the tree: its name after the tree's glyphs, then its columns.
	row := func(out, name string) string {
		for line := range strings.Lines(out) {
			if strings.Contains(line, "──"+name+" ") {
				return line
			}
		}

		return ""
	}

	var memory string

	testenv.WaitFor(t, "kubelet's /kubepods next to machined's cgroups", 5*time.Minute, func() error {
		out, errOut, code := cli.Run(t, "-n", node, "cgroups", "--preset", "memory", "--skip-cri-resolve")
		if code != 0 || row(out, "kubepods") == "" || row(out, "kubelet") == "" || row(out, "etcd") == "" {
			return fmt.Errorf("exit %d: %s%s", code, out, errOut)
		}

		memory = out

		return nil
	})

	cpu := cli.Must(t, "-n", node, "cgroups", "--preset", "cpu", "--skip-cri-resolve")

	for _, g := range []struct {
		name   string
		memory []string // MemLow, MemMin, MemMax as the memory preset shows them
		weight string
	}{
		{"init", []string{"192 MiB", "96 MiB"}, "39"},
		{"system", []string{"192 MiB", "96 MiB"}, "39"},
		{"runtime", []string{"96 MiB", "48 MiB"}, "20"},
		{"apid", []string{"32 MiB", "16 MiB", "128 MiB"}, "20"},
		{"trustd", []string{"16 MiB", "8.0 MiB", "24 MiB"}, "10"},
		{"podruntime", nil, "39"},
		{"etcd", []string{"256 MiB"}, "79"},
		{"kubelet", []string{"192 MiB", "96 MiB"}, "39"},
		{"kubepods", nil, ""},
	} {
		m, c := row(memory, g.name), row(cpu, g.name)
		if m == "" || c == "" {
			t.Errorf("no cgroup %s:\n%s\n%s", g.name, memory, cpu)

			continue
		}

		for _, w := range g.memory {
			if !strings.Contains(m, " "+w+" ") && !strings.HasSuffix(strings.TrimSpace(m), " "+w) {
				t.Errorf("cgroup %s: the memory preset's row %q lacks %s", g.name, m, w)
			}
		}

		// The CpuWeight column follows the name.
		if _, after, _ := strings.Cut(c, "──"+g.name+" "); g.weight != "" && (len(strings.Fields(after)) == 0 || strings.Fields(after)[0] != g.weight) {
			t.Errorf("cgroup %s: cpu.weight in %q, want %s", g.name, c, g.weight)
		}
	}

	t.Logf("talosctl cgroups --preset memory:\n%s\n--preset cpu:\n%s", memory, cpu)
}
