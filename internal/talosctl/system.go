package talosctl

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dustin/go-humanize"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/formatters"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"
)

func memoryCmd(g *Global) *cobra.Command {
	var verbose bool

	cmd := &cobra.Command{
		Use:     "memory",
		Aliases: []string{"m", "free"},
		Short:   "Show memory usage",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.run(cmd, func(ctx context.Context, s *session) error {
				callPeer, defaultNode := peerNode()
				resp, err := s.c.Memory(s.ctx(ctx), callPeer)

				return renderReply(cmd, resp, err, func(resp *machineapi.MemoryResponse) error {
					if verbose {
						return renderMemoryVerbose(cmd.OutOrStdout(), resp, defaultNode())
					}

					return renderMemory(cmd.OutOrStdout(), resp, defaultNode())
				})
			})
		},
	}

	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "display extended memory statistics")

	return cmd
}

// renderMemory writes the memory table in MiB.
func renderMemory(w io.Writer, resp *machineapi.MemoryResponse, defaultNode string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "NODE\tTOTAL\tUSED\tFREE\tSHARED\tBUFFERS\tCACHE\tAVAILABLE")

	for _, msg := range resp.GetMessages() {
		m := msg.GetMeminfo()
		used := m.GetMemtotal() - m.GetMemfree() - m.GetCached() - m.GetBuffers()

		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n",
			nodeOf(msg.GetMetadata().GetHostname(), defaultNode),
			m.GetMemtotal()/1024, used/1024, m.GetMemfree()/1024, m.GetShmem()/1024,
			m.GetBuffers()/1024, m.GetCached()/1024, m.GetMemavailable()/1024)
	}

	return tw.Flush()
}

// renderMemoryVerbose writes every meminfo field, per node.
func renderMemoryVerbose(w io.Writer, resp *machineapi.MemoryResponse, defaultNode string) error {
	for _, msg := range resp.GetMessages() {
		fmt.Fprintf(w, "NODE: %s\n", nodeOf(msg.GetMetadata().GetHostname(), defaultNode))

		fields := msg.GetMeminfo().ProtoReflect()
		desc := fields.Descriptor().Fields()

		for i := range desc.Len() {
			fd := desc.Get(i)
			fmt.Fprintf(w, "%s: %d kB\n", fd.JSONName(), fields.Get(fd).Uint())
		}

		fmt.Fprintln(w)
	}

	return nil
}

func processesCmd(g *Global) *cobra.Command {
	var (
		sortBy string
		watch  bool
	)

	cmd := &cobra.Command{
		Use:     "processes",
		Aliases: []string{"p", "ps"},
		Short:   "List running processes",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if sortBy != "rss" && sortBy != "cpu" {
				return fmt.Errorf("--sort %q: use rss or cpu", sortBy)
			}

			return g.run(cmd, func(ctx context.Context, s *session) error {
				list := func(out io.Writer) error {
					callPeer, defaultNode := peerNode()
					resp, err := s.c.Processes(s.ctx(ctx), callPeer)

					return renderReply(cmd, resp, err, func(resp *machineapi.ProcessesResponse) error {
						return renderProcesses(out, resp, defaultNode(), sortBy)
					})
				}

				if !watch {
					return list(cmd.OutOrStdout())
				}

				// Redraw the table every second, top-like, until interrupted.
				for {
					var frame bytes.Buffer
					if err := list(&frame); err != nil {
						return err
					}

					fmt.Fprint(cmd.OutOrStdout(), "\x1b[H\x1b[2J"+frame.String())

					select {
					case <-ctx.Done():
						return nil
					case <-time.After(time.Second):
					}
				}
			})
		},
	}

	cmd.Flags().StringVarP(&sortBy, "sort", "s", "rss", "column to sort output by. [rss|cpu]")
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "stream running processes")

	return cmd
}

// renderProcesses writes the process table, sorted by resident memory or CPU time (largest first).
func renderProcesses(w io.Writer, resp *machineapi.ProcessesResponse, defaultNode, sortBy string) error {
	type row struct {
		node string
		p    *machineapi.ProcessInfo
	}

	var rows []row

	for _, msg := range resp.GetMessages() {
		for _, p := range msg.GetProcesses() {
			rows = append(rows, row{nodeOf(msg.GetMetadata().GetHostname(), defaultNode), p})
		}
	}

	slices.SortStableFunc(rows, func(a, b row) int {
		if sortBy == "cpu" {
			return cmp.Compare(b.p.GetCpuTime(), a.p.GetCpuTime())
		}

		return cmp.Compare(b.p.GetResidentMemory(), a.p.GetResidentMemory())
	})

	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "NODE\tPID\tSTATE\tTHREADS\tCPU-TIME\tVIRTMEM\tRESMEM\tLABEL\tCOMMAND")

	for _, r := range rows {
		p := r.p
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%.2f\t%s\t%s\t%s\t%s\n",
			r.node, p.GetPid(), p.GetState(), p.GetThreads(), p.GetCpuTime(),
			humanize.Bytes(p.GetVirtualMemory()), humanize.Bytes(p.GetResidentMemory()),
			p.GetLabel(), processCommand(p))
	}

	return tw.Flush()
}

// processCommand shows the full executable path in place of argv[0] when they match.
func processCommand(p *machineapi.ProcessInfo) string {
	if p.GetExecutable() == "" {
		return p.GetCommand()
	}

	args := strings.Fields(p.GetArgs())
	if len(args) > 0 && args[0] == filepath.Base(p.GetExecutable()) {
		args[0] = p.GetExecutable()

		return strings.Join(args, " ")
	}

	if p.GetArgs() != "" {
		return p.GetArgs()
	}

	return p.GetExecutable()
}

func mountsCmd(g *Global) *cobra.Command {
	return &cobra.Command{
		Use:     "mounts",
		Aliases: []string{"mount"},
		Short:   "List mounts",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.run(cmd, func(ctx context.Context, s *session) error {
				var p peer.Peer

				resp, err := s.c.Mounts(s.ctx(ctx), grpc.Peer(&p))

				return renderReply(cmd, resp, err, func(resp *machineapi.MountsResponse) error {
					return formatters.RenderMounts(resp, cmd.OutOrStdout(), &p)
				})
			})
		},
	}
}
