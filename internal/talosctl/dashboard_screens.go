package talosctl

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/gdamore/tcell/v2"
	"github.com/rivo/tview"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"google.golang.org/protobuf/types/known/emptypb"
)

// The dashboard's screens, in upstream's order: F1, F2, F3.
const (
	screenSummary = iota
	screenMonitor
	screenNetwork
)

var screens = []string{"Summary", "Monitor", "Network Config"}

// monitorView is what the Monitor screen shows of a node.
type monitorView struct {
	procs                     []procRow
	lastProcCPU               map[int32]float64 // CPU seconds per PID at the last sample
	lastProcAt                time.Time
	cpuShare                  map[string]float64 // user, system, ... as percent of the last interval
	lastCPU                   *machine.CPUStat
	running, blocked, created uint64
	contextSwitches           uint64
	mem                       *machine.MemInfo
	load1, load5, load15      float64
	loadErr                   string
}

// procRow is one line of the process table, with the columns of upstream's.
type procRow struct {
	pid, threads int32
	state        string
	cpu          float64 // percent of one CPU over the last interval
	rss, virt    uint64
	cpuTime      time.Duration
	command      string
}

// readProcesses turns a Processes answer into table rows, sorted by CPU use over the interval
// since the last sample (as upstream's), then by resident memory.
func (m *monitorView) readProcesses(list []*machine.ProcessInfo, now time.Time) {
	secs := now.Sub(m.lastProcAt).Seconds()
	cpu := make(map[int32]float64, len(list))
	rows := make([]procRow, 0, len(list))

	for _, p := range list {
		cpu[p.GetPid()] = p.GetCpuTime()

		row := procRow{
			pid: p.GetPid(), threads: p.GetThreads(), state: p.GetState(),
			rss: p.GetResidentMemory(), virt: p.GetVirtualMemory(),
			cpuTime: time.Duration(p.GetCpuTime() * float64(time.Second)).Truncate(time.Second / 100),
			command: processCommand(p),
		}

		if last, ok := m.lastProcCPU[p.GetPid()]; ok && !m.lastProcAt.IsZero() && secs > 0 {
			row.cpu = max(0, p.GetCpuTime()-last) / secs * 100
		}

		rows = append(rows, row)
	}

	slices.SortFunc(rows, func(a, b procRow) int {
		return cmp.Or(cmp.Compare(b.cpu, a.cpu), cmp.Compare(b.rss, a.rss), cmp.Compare(a.pid, b.pid))
	})

	m.procs, m.lastProcCPU, m.lastProcAt = rows, cpu, now
}

// readStat keeps the CPU time split of the last interval and the process counters.
func (m *monitorView) readStat(s *machine.SystemStat) {
	t := s.GetCpuTotal()
	m.running, m.blocked, m.created, m.contextSwitches = s.GetProcessRunning(), s.GetProcessBlocked(), s.GetProcessCreated(), s.GetContextSwitches()

	if last := m.lastCPU; last != nil {
		parts := map[string]float64{
			"user": t.GetUser() - last.GetUser(), "nice": t.GetNice() - last.GetNice(),
			"system": t.GetSystem() - last.GetSystem(), "idle": t.GetIdle() - last.GetIdle(),
			"iowait": t.GetIowait() - last.GetIowait(), "irq": t.GetIrq() - last.GetIrq(),
			"softirq": t.GetSoftIrq() - last.GetSoftIrq(), "steal": t.GetSteal() - last.GetSteal(),
		}

		total := 0.0
		for _, x := range parts {
			total += max(0, x)
		}

		if total > 0 {
			for k, x := range parts {
				parts[k] = 100 * max(0, x) / total
			}

			m.cpuShare = parts
		}
	}

	m.lastCPU = t
}

func (m *monitorView) readLoad(ctx context.Context, c *client.Client) {
	resp, err := c.MachineClient.LoadAvg(ctx, &emptypb.Empty{})
	if err != nil || len(resp.GetMessages()) == 0 {
		m.loadErr = fmt.Sprint("load average: ", err)

		return
	}

	l := resp.GetMessages()[0]
	m.load1, m.load5, m.load15, m.loadErr = l.GetLoad1(), l.GetLoad5(), l.GetLoad15(), ""
}

// networkView is what the Network Config screen shows: the node's network resources.
type networkView struct {
	hostname, err                  string
	resolvers, timeServers, search []string
	links, addresses, routes       [][]string // table rows
}

// read lists the node's network resources as `talosctl get links/addresses/routes/resolvers/
// timeservers/hostname` does, through the COSI state API.
func (n *networkView) read(ctx context.Context, c *client.Client) {
	var errs []string

	fail := func(what string, err error) { errs = append(errs, what+": "+err.Error()) }

	if hs, err := safe.StateGetByID[*network.HostnameStatus](ctx, c.COSI, network.HostnameID); err == nil {
		n.hostname = hs.TypedSpec().FQDN()
	} else {
		fail("hostname", err)
	}

	if rs, err := safe.StateGetByID[*network.ResolverStatus](ctx, c.COSI, network.ResolverID); err == nil {
		n.resolvers = n.resolvers[:0:0]
		for _, a := range rs.TypedSpec().DNSServers {
			n.resolvers = append(n.resolvers, a.String())
		}

		n.search = rs.TypedSpec().SearchDomains
	} else {
		fail("resolvers", err)
	}

	if ts, err := safe.StateGetByID[*network.TimeServerStatus](ctx, c.COSI, network.TimeServerID); err == nil {
		n.timeServers = ts.TypedSpec().NTPServers
	} else {
		fail("timeservers", err)
	}

	if links, err := safe.StateListAll[*network.LinkStatus](ctx, c.COSI); err == nil {
		n.links = n.links[:0:0]
		for l := range links.All() {
			s := l.TypedSpec()
			n.links = append(n.links, []string{l.Metadata().ID(), s.Type.String(), s.OperationalState.String(), fmt.Sprint(s.MTU), s.HardwareAddr.String()})
		}
	} else {
		fail("links", err)
	}

	if addrs, err := safe.StateListAll[*network.AddressStatus](ctx, c.COSI); err == nil {
		n.addresses = n.addresses[:0:0]
		for a := range addrs.All() {
			s := a.TypedSpec()
			n.addresses = append(n.addresses, []string{s.Address.String(), s.LinkName, s.Family.String(), s.Scope.String()})
		}
	} else {
		fail("addresses", err)
	}

	if routes, err := safe.StateListAll[*network.RouteStatus](ctx, c.COSI); err == nil {
		n.routes = n.routes[:0:0]
		for r := range routes.All() {
			s := r.TypedSpec()

			dst, gw := "default", ""
			if s.Destination.IsValid() {
				dst = s.Destination.String()
			}

			if s.Gateway.IsValid() {
				gw = s.Gateway.String()
			}

			n.routes = append(n.routes, []string{dst, gw, s.OutLinkName, s.Table.String(), fmt.Sprint(s.Priority)})
		}
	} else {
		fail("routes", err)
	}

	n.err = strings.Join(errs, "; ")
}

// text is the Network Config screen of one node.
func (n *networkView) text(node string) string {
	var b strings.Builder

	b.WriteString("[yellow]Read-only view of the node's network resources. Upstream's screen edits the platform network config of a node in maintenance mode; use `talosctl edit machineconfig` or `patch` here.[-]\n\n")
	fmt.Fprintf(&b, "Node:          %s\nHostname:      %s\n", node, tview.Escape(n.hostname))
	fmt.Fprintf(&b, "DNS servers:   %s\nSearch:        %s\nTime servers:  %s\n",
		tview.Escape(strings.Join(n.resolvers, ", ")), tview.Escape(strings.Join(n.search, ", ")), tview.Escape(strings.Join(n.timeServers, ", ")))

	table := func(title string, head []string, rows [][]string) {
		fmt.Fprintf(&b, "\n[::b]%s[::-]\n", title)

		all := append([][]string{head}, rows...)
		widths := make([]int, len(head))

		for _, r := range all {
			for i, c := range r {
				widths[i] = max(widths[i], len([]rune(c)))
			}
		}

		for _, r := range all {
			var line strings.Builder
			for i, c := range r {
				fmt.Fprintf(&line, "%-*s  ", widths[i], c)
			}

			b.WriteString(tview.Escape(strings.TrimRight(line.String(), " ")) + "\n")
		}
	}

	byFirst := func(rows [][]string) [][]string {
		return slices.SortedFunc(slices.Values(rows), func(a, b []string) int { return strings.Compare(a[0], b[0]) })
	}

	table("Links", []string{"NAME", "TYPE", "STATE", "MTU", "HARDWARE ADDRESS"}, byFirst(n.links))
	table("Addresses", []string{"ADDRESS", "LINK", "FAMILY", "SCOPE"}, byFirst(n.addresses))
	table("Routes", []string{"DESTINATION", "GATEWAY", "LINK", "TABLE", "METRIC"}, byFirst(n.routes))

	if n.err != "" {
		fmt.Fprintf(&b, "\n[red]error: %s[-]\n", tview.Escape(n.err))
	}

	return b.String()
}

// renderMonitor draws the Monitor screen of one node; d.mu is held.
func (d *dashboard) renderMonitor(v *nodeView) {
	m := &v.monitor

	var b strings.Builder

	if m.cpuShare != nil {
		s := m.cpuShare
		fmt.Fprintf(&b, "CPU:     user %.1f%%  nice %.1f%%  system %.1f%%  idle %.1f%%\n         iowait %.1f%%  irq %.1f%%  softirq %.1f%%  steal %.1f%%\n",
			s["user"], s["nice"], s["system"], s["idle"], s["iowait"], s["irq"], s["softirq"], s["steal"])
	} else {
		b.WriteString("CPU:     -\n\n")
	}

	if m.loadErr == "" {
		fmt.Fprintf(&b, "Load:    %.2f %.2f %.2f\n", m.load1, m.load5, m.load15)
	} else {
		fmt.Fprintf(&b, "Load:    %s\n", tview.Escape(m.loadErr))
	}

	fmt.Fprintf(&b, "Procs:   %d (running %d, blocked %d, created %d), context switches %d\n", v.processes, m.running, m.blocked, m.created, m.contextSwitches)

	if mi := m.mem; mi != nil {
		kib := func(n uint64) string { return bytesText(float64(n) * 1024) }
		fmt.Fprintf(&b, "Memory:  total %s  used %s  free %s\n         buffers %s  cached %s  shmem %s\nSwap:    total %s  free %s\n",
			kib(mi.GetMemtotal()), kib(mi.GetMemtotal()-mi.GetMemavailable()), kib(mi.GetMemfree()),
			kib(mi.GetBuffers()), kib(mi.GetCached()), kib(mi.GetShmem()), kib(mi.GetSwaptotal()), kib(mi.GetSwapfree()))
	}

	if v.err != "" {
		fmt.Fprintf(&b, "[red]error: %s[-]\n", tview.Escape(v.err))
	}

	d.monInfo.SetText(b.String())

	b.Reset()
	fmt.Fprintf(&b, "CPU %s\n%s\nMemory %s\n%s\n", percent(v.cpu), sparkline(v.cpu), percent(v.mem), sparkline(v.mem))

	if r := v.ioRate; r != nil {
		fmt.Fprintf(&b, "Network: rx %s/s, tx %s/s\nDisk:    read %s/s, write %s/s\n", bytesText(r.netRx), bytesText(r.netTx), bytesText(r.diskRead), bytesText(r.diskWrite))
	} else {
		b.WriteString("Network: -\nDisk:    -\n")
	}

	d.monGraphs.SetText(b.String())

	rows := d.procPage()
	d.procTop = max(0, min(d.procTop, len(m.procs)-1))

	b.Reset()
	fmt.Fprintf(&b, "[::b]%7s  %1s  %6s  %6s  %9s  %9s  %10s  %4s  %s[::-]\n", "PID", "S", "CPU%", "MEM%", "VIRT", "RES", "TIME+", "THR", "COMMAND")

	for _, p := range m.procs[d.procTop:min(len(m.procs), d.procTop+rows)] {
		memPct := 0.0
		if v.memTotal > 0 {
			memPct = 100 * float64(p.rss) / float64(v.memTotal)
		}

		fmt.Fprintf(&b, "%7d  %1s  %6.1f  %6.1f  %9s  %9s  %10s  %4d  %s\n", p.pid, tview.Escape(p.state), p.cpu, memPct,
			bytesText(float64(p.virt)), bytesText(float64(p.rss)), p.cpuTime, p.threads, tview.Escape(p.command))
	}

	d.procBox.SetTitle(fmt.Sprintf(" Processes (%d-%d of %d, by CPU) ", min(d.procTop+1, len(m.procs)), min(len(m.procs), d.procTop+rows), len(m.procs)))
	d.procBox.SetText(b.String())
}

// procPage is how many process rows fit in the table (before the first draw: a guess).
func (d *dashboard) procPage() int {
	_, _, _, h := d.procBox.GetInnerRect()
	if h <= 1 {
		return 20
	}

	return h - 1 // the heading
}

// scrollKey scrolls the process list with upstream's keys; d.mu is held.
func (d *dashboard) scrollKey(ev *tcell.EventKey) bool {
	page := d.procPage()

	switch k := ev.Key(); {
	case k == tcell.KeyDown || ev.Rune() == 'j':
		d.procTop++
	case k == tcell.KeyUp || ev.Rune() == 'k':
		d.procTop--
	case k == tcell.KeyCtrlD:
		d.procTop += page / 2
	case k == tcell.KeyCtrlU:
		d.procTop -= page / 2
	case k == tcell.KeyCtrlF || k == tcell.KeyPgDn:
		d.procTop += page
	case k == tcell.KeyCtrlB || k == tcell.KeyPgUp:
		d.procTop -= page
	default:
		return false
	}

	d.procTop = max(0, d.procTop)

	return true
}

// footerText lists the nodes and the screens with their keys, the selected ones highlighted,
// and the other shortcuts.
func (d *dashboard) footerText() string {
	var nodes, tabs []string

	for i, n := range d.s.nodes {
		if i == d.selected {
			n = "[black:white]" + n + "[-:-]"
		}

		nodes = append(nodes, n)
	}

	for i, name := range screens {
		tab := fmt.Sprintf("F%d: %s", i+1, name)
		if i == d.screen {
			tab = "[black:white]" + tab + "[-:-]"
		}

		tabs = append(tabs, tab)
	}

	return strings.Join(nodes, " | ") + " ─── " + strings.Join(tabs, " ─── ") + " ─── ←/→ h/l: node  ↑/↓ j/k: scroll  q: quit"
}
