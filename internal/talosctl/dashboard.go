package talosctl

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/gdamore/tcell/v2"
	"github.com/rivo/tview"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/emptypb"
)

// dashboardCmd is the live terminal UI: one node at a time (switched with keys) on three
// screens as upstream's (F1 Summary: summary, graphs and machined's log; F2 Monitor: the
// process table and the CPU, memory, network and disk figures; F3 Network Config: the node's
// links, addresses, routes and resolvers), refreshed every --update-interval.
func dashboardCmd(g *Global) *cobra.Command {
	var interval time.Duration

	cmd := &cobra.Command{
		Use:   "dashboard",
		Short: "Cluster dashboard with node overview, logs and real-time metrics",
		Long: `Cluster dashboard with node overview, logs and real-time metrics.

Keyboard shortcuts:

 - F1, F2, F3: the Summary, Monitor and Network Config screens
 - h, <Left>: switch one node to the left
 - l, <Right>: switch one node to the right
 - j, <Down>: scroll the process list (Monitor) down
 - k, <Up>: scroll the process list up
 - <C-d>: scroll the process list half a page down
 - <C-u>: scroll the process list half a page up
 - <C-f>, <PgDn>: scroll the process list one page down
 - <C-b>, <PgUp>: scroll the process list one page up
 - q, <C-c>: quit`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if interval <= 0 {
				return fmt.Errorf("--update-interval %s: use a positive duration such as 3s", interval)
			}

			return g.run(cmd, func(ctx context.Context, s *session) error {
				return newDashboard(s, interval).run(ctx)
			})
		},
	}

	cmd.Flags().DurationVarP(&interval, "update-interval", "d", 3*time.Second, "interval between updates")

	return cmd
}

// historyLen is how many samples the graphs show.
const historyLen = 60

// nodeView is what the dashboard knows of one node.
type nodeView struct {
	hostname, version, err string
	stage, machineType     string // MachineStatus (stage, readiness, unmet conditions), MachineType
	uptime                 time.Duration
	memTotal, memUsed      uint64
	processes              int
	services               []string
	addresses              []string
	logs                   string
	cpu, mem               []float64 // percent samples, oldest first
	lastBusy, lastTotal    uint64
	io                     ioCounters  // network and disk bytes at the last sample
	ioRate                 *ioCounters // bytes per second between the last two samples
	monitor                monitorView
	network                networkView
}

// ioCounters are a node's network bytes (every device but lo: a process-mode node's own API
// traffic is loopback) and disk bytes (sectors of 512 bytes).
type ioCounters struct {
	at                                time.Time
	netRx, netTx, diskRead, diskWrite float64
}

type dashboard struct {
	s        *session
	interval time.Duration

	mu       sync.Mutex
	nodes    map[string]*nodeView
	selected int
	screen   int // index in screens
	procTop  int // the first process row shown on the Monitor screen

	app                                     *tview.Application
	pages                                   *tview.Pages
	header, summary, graphs, logBox, footer *tview.TextView
	monInfo, monGraphs, procBox, netBox     *tview.TextView
}

func newDashboard(s *session, interval time.Duration) *dashboard {
	d := &dashboard{s: s, interval: interval, nodes: map[string]*nodeView{}, app: tview.NewApplication()}

	box := func(title string) *tview.TextView {
		v := tview.NewTextView().SetDynamicColors(true)
		v.SetBorder(true).SetTitle(" " + title + " ")

		return v
	}

	d.header = tview.NewTextView().SetDynamicColors(true)
	d.summary, d.graphs, d.logBox = box("Summary"), box("CPU / Memory"), box("machined logs")
	d.logBox.SetScrollable(true)
	d.monInfo, d.monGraphs, d.procBox = box("CPU / Memory / Processes"), box("Graphs / Network / Disk"), box("Processes")
	d.procBox.SetWrap(false) // one process a line, its command cut at the edge as upstream's
	d.netBox = box("Network Config")
	d.footer = tview.NewTextView().SetDynamicColors(true)

	top := tview.NewFlex().AddItem(d.summary, 0, 1, false).AddItem(d.graphs, 0, 1, false)
	summary := tview.NewFlex().SetDirection(tview.FlexRow).AddItem(top, 16, 0, false).AddItem(d.logBox, 0, 1, false)

	monTop := tview.NewFlex().AddItem(d.monInfo, 0, 1, false).AddItem(d.monGraphs, 0, 1, false)
	monitor := tview.NewFlex().SetDirection(tview.FlexRow).AddItem(monTop, 12, 0, false).AddItem(d.procBox, 0, 1, false)

	d.pages = tview.NewPages()
	for i, page := range []tview.Primitive{summary, monitor, d.netBox} {
		d.pages.AddPage(screens[i], page, true, i == 0)
	}

	layout := tview.NewFlex().SetDirection(tview.FlexRow).
		AddItem(d.header, 1, 0, false).
		AddItem(d.pages, 0, 1, false).
		AddItem(d.footer, 1, 0, false)

	d.app.SetRoot(layout, true).SetInputCapture(d.key)

	return d
}

// key handles upstream's shortcuts: F1..F3 pick the screen, h/l and the arrows move between
// the nodes (stopping at the ends, as upstream's), j/k and the paging keys scroll the
// process list, q quits.
func (d *dashboard) key(ev *tcell.EventKey) *tcell.EventKey {
	if ev.Rune() == 'q' || ev.Key() == tcell.KeyCtrlC {
		d.app.Stop()

		return nil
	}

	d.mu.Lock()

	handled := true

	switch k := ev.Key(); {
	case k >= tcell.KeyF1 && k < tcell.KeyF1+tcell.Key(len(screens)):
		d.screen, d.procTop = int(k-tcell.KeyF1), 0
		d.pages.SwitchToPage(screens[d.screen])
	case k == tcell.KeyRight || ev.Rune() == 'l':
		d.selected = min(d.selected+1, len(d.s.nodes)-1)
	case k == tcell.KeyLeft || ev.Rune() == 'h':
		d.selected = max(d.selected-1, 0)
	case d.screen == screenMonitor:
		handled = d.scrollKey(ev)
	default:
		handled = false
	}

	d.mu.Unlock()

	if !handled {
		return ev
	}

	d.render()

	return nil
}

func (d *dashboard) run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	go func() {
		for {
			for _, node := range d.s.nodes {
				d.poll(d.s.nodeCtx(ctx, node), node)
			}

			d.app.QueueUpdateDraw(d.render)

			select {
			case <-ctx.Done():
				return
			case <-time.After(d.interval):
			}
		}
	}()

	d.render()

	return d.app.Run()
}

// poll reads one node's state; a failing call is shown on the node's summary, not fatal.
func (d *dashboard) poll(ctx context.Context, node string) {
	d.mu.Lock()
	v := d.nodes[node]

	if v == nil {
		v = &nodeView{}
		d.nodes[node] = v
	}
	d.mu.Unlock()

	next := *v
	next.err = ""

	if err := readNode(ctx, d.s.c, &next); err != nil {
		next.err = err.Error()
	}

	d.mu.Lock()
	*v = next
	d.mu.Unlock()
}

func readNode(ctx context.Context, c *client.Client, v *nodeView) error {
	ver, err := c.Version(ctx)
	if err != nil {
		return fmt.Errorf("version: %w", err)
	}

	if m := ver.GetMessages(); len(m) > 0 {
		v.version = m[0].GetVersion().GetTag()
	}

	if hs, err := safe.StateGetByID[*network.HostnameStatus](ctx, c.COSI, network.HostnameID); err == nil {
		v.hostname = hs.TypedSpec().FQDN()
	}

	if ms, err := safe.StateGetByID[*runtimeres.MachineStatus](ctx, c.COSI, runtimeres.MachineStatusID); err == nil {
		v.stage = stageText(ms.TypedSpec())
	}

	if mt, err := safe.StateGetByID[*config.MachineType](ctx, c.COSI, config.MachineTypeID); err == nil {
		v.machineType = mt.MachineType().String()
	}

	if stat, err := c.MachineClient.SystemStat(ctx, &emptypb.Empty{}); err == nil && len(stat.GetMessages()) > 0 {
		m := stat.GetMessages()[0]
		v.uptime = time.Since(time.Unix(int64(m.GetBootTime()), 0)).Truncate(time.Second)

		v.monitor.readStat(m)

		t := m.GetCpuTotal()
		busy := uint64(t.GetUser() + t.GetNice() + t.GetSystem() + t.GetIrq() + t.GetSoftIrq() + t.GetSteal())
		total := busy + uint64(t.GetIdle()+t.GetIowait())

		if v.lastTotal > 0 && total > v.lastTotal {
			v.cpu = appendSample(v.cpu, 100*float64(busy-v.lastBusy)/float64(total-v.lastTotal))
		}

		v.lastBusy, v.lastTotal = busy, total
	}

	if mem, err := c.Memory(ctx); err == nil && len(mem.GetMessages()) > 0 {
		mi := mem.GetMessages()[0].GetMeminfo()
		// /proc/meminfo's figures are KiB.
		v.memTotal, v.memUsed = mi.GetMemtotal()<<10, (mi.GetMemtotal()-mi.GetMemavailable())<<10
		v.monitor.mem = mi

		if v.memTotal > 0 {
			v.mem = appendSample(v.mem, 100*float64(v.memUsed)/float64(v.memTotal))
		}
	}

	if ps, err := c.Processes(ctx); err == nil && len(ps.GetMessages()) > 0 {
		v.processes = len(ps.GetMessages()[0].GetProcesses())
		v.monitor.readProcesses(ps.GetMessages()[0].GetProcesses(), time.Now())
	}

	v.monitor.readLoad(ctx, c)
	v.network.read(ctx, c)

	if sl, err := c.ServiceList(ctx); err == nil && len(sl.GetMessages()) > 0 {
		v.services = v.services[:0:0]
		for _, svc := range sl.GetMessages()[0].GetServices() {
			v.services = append(v.services, fmt.Sprintf("%s %s", svc.GetId(), svc.GetState()))
		}
	}

	if addrs, err := safe.StateListAll[*network.AddressStatus](ctx, c.COSI); err == nil {
		v.addresses = v.addresses[:0:0]
		for a := range addrs.All() {
			// 127.0.0.1 and ::1 are every node's; process-mode nodes' own addresses are 127.5.x.y.
			if ip := a.TypedSpec().Address; ip.Addr().String() != "127.0.0.1" && ip.Addr().String() != "::1" {
				v.addresses = append(v.addresses, ip.String())
			}
		}

		slices.Sort(v.addresses)
	}

	readIO(ctx, c, v)

	v.logs = tailLog(ctx, c, "machined", 30)

	return nil
}

// readIO samples the network and disk counters; from the second sample on, v.ioRate holds
// their rates.
func readIO(ctx context.Context, c *client.Client, v *nodeView) {
	netStats, err := c.MachineClient.NetworkDeviceStats(ctx, &emptypb.Empty{})
	if err != nil || len(netStats.GetMessages()) == 0 {
		return
	}

	disk, err := c.MachineClient.DiskStats(ctx, &emptypb.Empty{})
	if err != nil || len(disk.GetMessages()) == 0 {
		return
	}

	now := ioCounters{at: time.Now()}

	for _, dev := range netStats.GetMessages()[0].GetDevices() {
		if dev.GetName() != "lo" {
			now.netRx += float64(dev.GetRxBytes())
			now.netTx += float64(dev.GetTxBytes())
		}
	}

	total := disk.GetMessages()[0].GetTotal()
	now.diskRead, now.diskWrite = float64(total.GetReadSectors()*512), float64(total.GetWriteSectors()*512)

	if last := v.io; !last.at.IsZero() {
		if secs := now.at.Sub(last.at).Seconds(); secs > 0 {
			rate := func(a, b float64) float64 { return max(0, b-a) / secs }
			v.ioRate = &ioCounters{
				netRx: rate(last.netRx, now.netRx), netTx: rate(last.netTx, now.netTx),
				diskRead: rate(last.diskRead, now.diskRead), diskWrite: rate(last.diskWrite, now.diskWrite),
			}
		}
	}

	v.io = now
}

func tailLog(ctx context.Context, c *client.Client, id string, lines int32) string {
	stream, err := c.Logs(ctx, "system", common.ContainerDriver_CONTAINERD, id, false, lines)
	if err != nil {
		return err.Error()
	}

	r, err := client.ReadStream(stream)
	if err != nil {
		return err.Error()
	}

	defer r.Close()

	b, _ := io.ReadAll(r)

	return string(b)
}

func appendSample(s []float64, x float64) []float64 {
	s = append(s, x)
	if len(s) > historyLen {
		s = s[len(s)-historyLen:]
	}

	return s
}

// render draws the selected node; called on the UI goroutine (or before it runs).
func (d *dashboard) render() {
	d.mu.Lock()
	defer d.mu.Unlock()

	var tabs []string

	for i, n := range d.s.nodes {
		if i == d.selected {
			n = "[black:white]" + n + "[-:-]"
		}

		tabs = append(tabs, n)
	}

	d.header.SetText("Talos dashboard  nodes: " + strings.Join(tabs, "  "))
	d.footer.SetText(d.footerText())

	node := d.s.nodes[d.selected]

	v := d.nodes[node]
	if v == nil {
		for _, box := range []*tview.TextView{d.summary, d.monInfo, d.procBox, d.netBox} {
			box.SetText("connecting to " + node + "…")
		}

		return
	}

	switch d.screen {
	case screenMonitor:
		d.renderMonitor(v)

		return
	case screenNetwork:
		d.netBox.SetText(v.network.text(node))

		return
	}

	var b strings.Builder

	fmt.Fprintf(&b, "Node:      %s\nHost:      %s\nVersion:   %s\nUptime:    %s\n", node, v.hostname, v.version, v.uptime)
	fmt.Fprintf(&b, "Type:      %s\nStage:     %s\n", v.machineType, tview.Escape(v.stage))
	fmt.Fprintf(&b, "CPU:       %s\nMemory:    %d MiB / %d MiB\nProcesses: %d\n", percent(v.cpu), v.memUsed>>20, v.memTotal>>20, v.processes)
	if r := v.ioRate; r != nil {
		fmt.Fprintf(&b, "Network:   rx %s/s, tx %s/s\nDisk:      read %s/s, write %s/s\n", bytesText(r.netRx), bytesText(r.netTx), bytesText(r.diskRead), bytesText(r.diskWrite))
	} else {
		b.WriteString("Network:   -\nDisk:      -\n")
	}

	fmt.Fprintf(&b, "Addresses: %s\nServices:  %s\n", strings.Join(v.addresses, ", "), strings.Join(v.services, ", "))

	if v.err != "" {
		fmt.Fprintf(&b, "[red]error: %s[-]\n", tview.Escape(v.err))
	}

	d.summary.SetText(b.String())
	d.graphs.SetText(fmt.Sprintf("CPU %s\n%s\n\nMemory %s\n%s", percent(v.cpu), sparkline(v.cpu), percent(v.mem), sparkline(v.mem)))
	d.logBox.SetText(tview.Escape(v.logs)).ScrollToEnd()
}

// stageText is the machine's stage and readiness as upstream's dashboard shows them:
// "running, ready", or "booting, not ready (services: etcd not running)".
func stageText(s *runtimeres.MachineStatusSpec) string {
	if s.Status.Ready {
		return strings.ToLower(s.Stage.String()) + ", ready"
	}

	var unmet []string
	for _, c := range s.Status.UnmetConditions {
		unmet = append(unmet, c.Name+": "+c.Reason)
	}

	text := strings.ToLower(s.Stage.String()) + ", not ready"
	if len(unmet) > 0 {
		text += " (" + strings.Join(unmet, "; ") + ")"
	}

	return text
}

// bytesText is n bytes in binary units: "512 B", "1.5 KiB".
func bytesText(n float64) string {
	units := []string{"B", "KiB", "MiB", "GiB"}
	i := 0

	for ; n >= 1024 && i < len(units)-1; i++ {
		n /= 1024
	}

	if i == 0 {
		return fmt.Sprintf("%.0f B", n)
	}

	return fmt.Sprintf("%.1f %s", n, units[i])
}

func percent(s []float64) string {
	if len(s) == 0 {
		return "-"
	}

	return fmt.Sprintf("%.1f%%", s[len(s)-1])
}

// sparkline draws percent samples as one row of block characters.
func sparkline(s []float64) string {
	const blocks = "▁▂▃▄▅▆▇█"

	levels := []rune(blocks)

	var b strings.Builder

	for _, x := range s {
		i := int(x / 100 * float64(len(levels)-1))
		b.WriteRune(levels[max(0, min(i, len(levels)-1))])
	}

	return b.String()
}
