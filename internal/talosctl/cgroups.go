package talosctl

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"text/template"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"
)

// cgroupSchema is a table's columns: a name and a Go template over a cgroup (cgroupView),
// the shape of upstream's --schema-file.
type cgroupSchema struct {
	Columns []struct {
		Name     string `yaml:"name"`
		Template string `yaml:"template"`
	} `yaml:"columns"`
}

// cgroupPresets are upstream's presets: the same columns over the same cgroup v2 files.
var cgroupPresets = map[string]string{
	"cpu": `columns:
  - {name: CpuWeight, template: '{{ .CPUWeight | printf "%6s" }}'}
  - {name: CpuNice, template: '{{ .CPUWeightNice | printf "%6s" }}'}
  - {name: CpuMax, template: '{{ .CPUMax | printf "%6s" }}'}
  - {name: CpuUser, template: '{{ .CPUStat.user_usec.UsecToDuration | printf "%12s" }}'}
  - {name: User/%, template: '{{ if .Parent }}{{ .CPUStat.user_usec.DivideBy .Parent.CPUStat.user_usec | printf "%6s" }}%{{ else }}-{{ end }}'}
  - {name: CpuSystem, template: '{{ .CPUStat.system_usec.UsecToDuration | printf "%12s" }}'}
  - {name: System/%, template: '{{ if .Parent }}{{ .CPUStat.system_usec.DivideBy .Parent.CPUStat.system_usec | printf "%6s" }}%{{ else }}-{{ end }}'}
  - {name: Throttled, template: '{{ .CPUStat.throttled_usec.UsecToDuration | printf "%12s" }}'}`,
	"cpuset": `columns:
  - {name: CpuSet, template: '{{ .CPUSetCPUs | printf "%12s" }}'}
  - {name: CpuSet(Eff), template: '{{ .CPUSetCPUsEffective | printf "%12s" }}'}
  - {name: Mems, template: '{{ .CPUSetMems | printf "%12s" }}'}
  - {name: Mems(Eff), template: '{{ .CPUSetMemsEffective | printf "%12s" }}'}`,
	"io": `columns:
  - {name: Bytes Read/Written, template: '{{ range $disk, $v := .IOStat }}{{ if $v }}{{ $disk }}: {{ $v.rbytes.HumanizeIBytes }}/{{ $v.wbytes.HumanizeIBytes }} {{ end }}{{ end }}'}
  - {name: ios Read/Write, template: '{{ if .Parent }}{{ range $disk, $v := .IOStat }}{{ $disk }}: {{ $v.rios }}/{{ $v.wios }} {{ end }}{{ end }}'}
  - {name: PressAvg10, template: '{{ .IOPressure.some.avg10 | printf "%6s" }}'}
  - {name: PressAvg60, template: '{{ .IOPressure.some.avg60 | printf "%6s" }}'}
  - {name: PressTotal, template: '{{ .IOPressure.some.total.UsecToDuration | printf "%12s" }}'}`,
	"memory": `columns:
  - {name: MemCurrent, template: '{{ .MemoryCurrent.HumanizeIBytes | printf "%8s" }}'}
  - {name: MemPeak, template: '{{ .MemoryPeak.HumanizeIBytes | printf "%8s" }}'}
  - {name: MemLow, template: '{{ .MemoryLow.HumanizeIBytes | printf "%8s" }}'}
  - {name: Peak/Low, template: '{{ .MemoryPeak.DivideBy .MemoryLow | printf "%6s%%" }}'}
  - {name: MemHigh, template: '{{ .MemoryHigh.HumanizeIBytes | printf "%8s" }}'}
  - {name: MemMin, template: '{{ .MemoryMin.HumanizeIBytes | printf "%8s" }}'}
  - {name: Current/Min, template: '{{ .MemoryCurrent.DivideBy .MemoryMin | printf "%6s%%" }}'}
  - {name: MemMax, template: '{{ .MemoryMax.HumanizeIBytes | printf "%8s" }}'}`,
	"process": `columns:
  - {name: PidsCurrent, template: '{{ .PidsCurrent | printf "%8s" }}'}
  - {name: PidsPeak, template: '{{ .PidsPeak | printf "%8s" }}'}
  - {name: PidsMax, template: '{{ .PidsMax | printf "%8s" }}'}
  - {name: Procs, template: '{{ .CgroupProcs | len | printf "%7d" }}'}
  - {name: Threads, template: '{{ .CgroupThreads | len | printf "%7d" }}'}
  - {name: Processes, template: '{{ if .Parent }}{{ .CgroupProcsResolved | printf "%s" | printf "%.50s" }}{{ end }}'}`,
	"psi": `columns:
  - {name: MemCurrent, template: '{{ .MemoryCurrent.HumanizeIBytes | printf "%8s" }}'}
  - {name: MemPsiSome10, template: '{{ .MemoryPressure.some.avg10 | printf "%6s" }}'}
  - {name: MemPsi10, template: '{{ .MemoryPressure.full.avg10 | printf "%6s" }}'}
  - {name: CpuPsi10, template: '{{ .CPUPressure.full.avg10 | printf "%6s" }}'}
  - {name: IoPsi10, template: '{{ .IOPressure.full.avg10 | printf "%6s" }}'}`,
	"swap": `columns:
  - {name: SwapCurrent, template: '{{ .MemorySwapCurrent.HumanizeIBytes | printf "%8s" }}'}
  - {name: SwapPeak, template: '{{ .MemorySwapPeak.HumanizeIBytes | printf "%8s" }}'}
  - {name: SwapHigh, template: '{{ .MemorySwapHigh.HumanizeIBytes | printf "%8s" }}'}
  - {name: SwapMax, template: '{{ .MemorySwapMax.HumanizeIBytes | printf "%8s" }}'}`,
}

func presetNames() []string {
	names := make([]string, 0, len(cgroupPresets))
	for n := range cgroupPresets {
		names = append(names, n)
	}

	slices.Sort(names)

	return names
}

func cgroupsCmd(g *Global) *cobra.Command {
	var schemaFile, preset string

	var skipCRI bool

	cmd := &cobra.Command{
		Use:     "cgroups",
		Aliases: []string{"cg"},
		Short:   "Retrieve cgroups usage information",
		Long: `The cgroups command shows control group v2 usage of the node, read through the API
(a copy of /sys/fs/cgroup), as a tree. Presets focus on one subsystem: ` + strings.Join(presetNames(), ", ") + `.
A custom schema (YAML: columns of a name and a Go template) can be given with --schema-file.
A process-mode node shares the host's cgroup tree, so the host's tree is shown.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			schema, err := loadCgroupSchema(schemaFile, preset)
			if err != nil {
				return err
			}

			return g.run(cmd, func(ctx context.Context, s *session) error {
				ctx, err := s.single(ctx, "cgroups")
				if err != nil {
					return err
				}

				names := cgroupNames{procs: processNames(ctx, s, cmd.ErrOrStderr()), devices: blockDevices(ctx, s)}
				if !skipCRI {
					names.cgroups = criNames(ctx, s, cmd.ErrOrStderr())
				}

				r, err := s.c.Copy(ctx, constants.CgroupMountPath)
				if err != nil {
					return fmt.Errorf("copying %s: %w", constants.CgroupMountPath, err)
				}
				defer r.Close()

				root, err := readCgroupTree(r)
				if err != nil {
					return fmt.Errorf("reading the cgroups of the node: %w", err)
				}

				return printCgroups(cmd.OutOrStdout(), schema, root, names)
			})
		},
	}

	cmd.Flags().StringVar(&schemaFile, "schema-file", "", "path to the columns schema file")
	cmd.Flags().StringVar(&preset, "preset", "", fmt.Sprintf("preset name (one of: %v)", presetNames()))
	cmd.Flags().BoolVar(&skipCRI, "skip-cri-resolve", false, "do not resolve cgroup names via a request to CRI")
	cmd.MarkFlagsMutuallyExclusive("schema-file", "preset")

	return cmd
}

// compiledSchema is a schema's header and templates.
type compiledSchema struct {
	names     []string
	templates []*template.Template
}

func loadCgroupSchema(file, preset string) (*compiledSchema, error) {
	var src []byte

	switch {
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("--schema-file: %w", err)
		}

		src = b
	case preset != "":
		p, ok := cgroupPresets[preset]
		if !ok {
			return nil, fmt.Errorf("--preset %q: use one of %v", preset, presetNames())
		}

		src = []byte(p)
	default:
		return nil, fmt.Errorf("either --schema-file or --preset (one of %v) must be given", presetNames())
	}

	var schema cgroupSchema
	if err := yaml.Unmarshal(src, &schema); err != nil {
		return nil, fmt.Errorf("decoding the schema: %w", err)
	}

	out := &compiledSchema{}

	for i, c := range schema.Columns {
		// Missing keys (a cpu.stat without user_usec, as a cgroup v1 host's root) show as unset
		// values. The template is not named after its column: text/template formats its errors
		// with the name, and a '%' in it (User/%) garbles them.
		t, err := template.New(fmt.Sprint("column ", i+1)).Option("missingkey=zero").Parse(c.Template)
		if err != nil {
			return nil, fmt.Errorf("schema column %d (%s): %w", i, c.Name, err)
		}

		out.names = append(out.names, c.Name)
		out.templates = append(out.templates, t)
	}

	return out, nil
}

// printCgroups writes the header and the tree, one row per cgroup, children sorted by name.
func printCgroups(w io.Writer, schema *compiledSchema, root *cgroupNode, names cgroupNames) error {
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)

	fmt.Fprintln(tw, "NAME\t"+strings.Join(schema.names, "\t"))

	var walk func(name string, n, parent *cgroupNode, prefix string, last, top bool) error

	walk = func(name string, n, parent *cgroupNode, prefix string, last, top bool) error {
		edge, childPrefix := "├──", prefix+"│   "

		switch {
		case top:
			edge, childPrefix = "", ""
		case last:
			edge, childPrefix = "└──", prefix+"    "
		}

		view := &cgroupView{node: n, names: names}
		if parent != nil {
			view.parent = &cgroupView{node: parent, names: names}
		}

		cells := make([]string, len(schema.templates))

		for i, t := range schema.templates {
			var b strings.Builder
			if err := t.Execute(&b, view); err != nil {
				return fmt.Errorf("column %s of %s: %w", schema.names[i], name, err)
			}

			cells[i] = b.String()
		}

		fmt.Fprintf(tw, "%s%s%s\t%s\n", prefix, edge, names.cgroup(name), strings.Join(cells, "\t"))

		children := make([]string, 0, len(n.children))
		for c := range n.children {
			children = append(children, c)
		}

		sort.Strings(children)

		for i, c := range children {
			if err := walk(c, n.children[c], n, childPrefix, i == len(children)-1, false); err != nil {
				return err
			}
		}

		return nil
	}

	if err := walk(".", root, nil, "", true, true); err != nil {
		return err
	}

	return tw.Flush()
}

// criNames maps pod and container cgroup names to the names Kubernetes gives them; a node
// without CRI gets a warning, as upstream's talosctl gives.
func criNames(ctx context.Context, s *session, stderr io.Writer) map[string]string {
	out := map[string]string{}

	resp, err := s.c.Containers(ctx, constants.K8sContainerdNamespace, common.ContainerDriver_CRI)
	if err != nil {
		fmt.Fprintf(stderr, "warning: error getting containers: %v (--skip-cri-resolve skips this)\n", err)

		return out
	}

	for _, msg := range resp.GetMessages() {
		for _, c := range msg.GetContainers() {
			if c.GetUid() != "" && c.GetPodId() != "" {
				out["pod"+c.GetUid()] = c.GetPodId()
			}

			if c.GetInternalId() != "" {
				out[c.GetInternalId()] = c.GetName()
				if c.GetPodId() == c.GetName() {
					out[c.GetInternalId()] = "sandbox"
				}
			}
		}
	}

	return out
}

// processNames maps PIDs to executable names for the process columns.
func processNames(ctx context.Context, s *session, stderr io.Writer) map[string]string {
	out := map[string]string{}

	resp, err := s.c.Processes(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "warning: error getting processes: %v\n", err)

		return out
	}

	for _, msg := range resp.GetMessages() {
		for _, p := range msg.GetProcesses() {
			name := p.GetExecutable()
			if name == "" {
				name = p.GetCommand()
			}

			if i := strings.LastIndexByte(name, '/'); i >= 0 {
				name = name[i+1:]
			}

			out[fmt.Sprint(p.GetPid())] = name
		}
	}

	return out
}
