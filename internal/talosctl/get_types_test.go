package talosctl

import (
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/machine"

	"github.com/talos-go/talos/internal/configsupport"
	"github.com/talos-go/talos/internal/machined/resources"
	"github.com/talos-go/talos/internal/testenv"
)

// TestIntegrationGetEveryType runs `get` on a live node for every resource type the node
// registers: each answers, and its table carries the type's print columns (upstream's -o table
// columns, from the machinery definitions) with every row as wide as the header.
func TestIntegrationGetEveryType(t *testing.T) {
	isolate(t)

	addr := "127.5.23.3"
	n := testenv.StartNode(t, addr, testenv.Config(t, machine.TypeControlPlane, addr))
	sock := []string{"--machined-socket", n.Socket()}

	runUntil(t, ok, append([]string{"get", "hostnamestatus"}, sock...)...)

	withRows := 0

	for _, def := range resources.For(configsupport.Process) {
		rd := def.ResourceDefinition()

		out, stderr := runUntil(t, ok, append([]string{"get", rd.Type, "-n", "local"}, sock...)...)
		if stderr != "" {
			t.Errorf("get %s: stderr %q", rd.Type, stderr)
		}

		lines := strings.Split(strings.TrimRight(out, "\n"), "\n")

		want := []string{"NODE", "NAMESPACE", "TYPE", "ID", "VERSION"}
		for _, col := range rd.PrintColumns {
			want = append(want, strings.ToUpper(col.Name))
		}

		if out != "" {
			mustContain(t, lines[0], want...)
		}

		if len(lines) > 1 {
			withRows++

			// The table's columns start where the header's do: a row's VERSION sits under VERSION.
			at := strings.Index(lines[0], "VERSION")
			for _, row := range lines[1:] {
				if len(row) <= at || row[at] == ' ' {
					t.Errorf("get %s: row %q is not aligned with header %q", rd.Type, row, lines[0])
				}
			}
		}
	}

	t.Logf("%d types, %d with resources on a process-mode node", len(resources.For(configsupport.Process)), withRows)

	if withRows < len(resources.For(configsupport.Process))/3 {
		t.Errorf("only %d of %d types had resources", withRows, len(resources.For(configsupport.Process)))
	}
}
