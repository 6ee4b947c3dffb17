package install

import (
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"

	blockpb "github.com/siderolabs/talos/pkg/machinery/api/resource/definitions/block"
	"github.com/siderolabs/talos/pkg/machinery/cel/celenv"
	"github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/proto"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
)

// ChooseDisk is the disk the node installs to: as upstream's install, the first of disks (by
// kernel name, the order `talosctl get disks` lists them) that machine.install.diskSelector
// matches when the config has one (it wins over machine.install.disk), else
// machine.install.disk ("" when the config names neither). The selector is upstream's own
// expression of its fields (machinery's DiskMatchExpression): every criterion given must
// match, and read-only disks, CD-ROMs and devices without a transport (loop, device mapper)
// never do.
func ChooseDisk(cfg config.Install, disks map[string]block.DiskSpec) (string, error) {
	expr, err := cfg.DiskMatchExpression()
	if err != nil {
		return "", fmt.Errorf("machine.install.diskSelector: %w", err)
	}

	if expr == nil {
		return cfg.Disk(), nil
	}

	names := make([]string, 0, len(disks))
	for name := range disks {
		names = append(names, name)
	}

	slices.Sort(names)

	for _, name := range names {
		// The expression reads the disk as its API message, as `talosctl get disks -o yaml` shows it.
		res := block.NewDisk(block.NamespaceName, name)
		*res.TypedSpec() = disks[name]

		msg := &blockpb.DiskSpec{}
		if err = proto.ResourceSpecToProto(res, msg); err != nil {
			return "", err
		}

		ok, err := expr.EvalBool(celenv.DiskLocator(), map[string]any{"disk": msg, "system_disk": false})
		if err != nil {
			return "", fmt.Errorf("machine.install.diskSelector (%s) on %s: %w", expr, name, err)
		}

		if ok {
			return disks[name].DevPath, nil
		}
	}

	return "", fmt.Errorf("machine.install.diskSelector matches none of this machine's disks (as %s): change the selector, or name the disk in machine.install.disk; the disks:\n%s",
		expr, disksTable(names, disks))
}

// disksTable lists disks as `talosctl get disks` does.
func disksTable(names []string, disks map[string]block.DiskSpec) string {
	var b strings.Builder

	w := tabwriter.NewWriter(&b, 0, 0, 3, ' ', 0)
	fmt.Fprintln(w, "ID\tSIZE\tREAD ONLY\tTRANSPORT\tROTATIONAL\tWWID\tMODEL\tSERIAL")

	for _, name := range names {
		d := disks[name]
		fmt.Fprintf(w, "%s\t%s\t%t\t%s\t%t\t%s\t%s\t%s\n", name, d.PrettySize, d.Readonly, d.Transport, d.Rotational, d.WWID, d.Model, d.Serial)
	}

	w.Flush()

	lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}

	return strings.Join(lines, "\n")
}
