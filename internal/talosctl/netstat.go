package talosctl

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/spf13/cobra"
)

// netstatFlags are upstream's, letter for letter (-x for extend: -e is the endpoints flag).
type netstatFlags struct {
	verbose, extend, pid, timers, listening, all, pods bool
	tcp, udp, udplite, raw, ipv4, ipv6                 bool
}

func netstatCmd(g *Global) *cobra.Command {
	var fl netstatFlags

	cmd := &cobra.Command{
		Use:     "netstat",
		Aliases: []string{"ss"},
		Short:   "Show network connections and sockets",
		Long: `Show network connections and sockets of the node's network namespace.

A pod's sockets (an argument "namespace/pod", or --pods) need the node's containerd.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("sockets of pod %s: pods need containerd on the node, which process-mode nodes do not run; leave out the argument for the node's own sockets", args[0])
			}

			req := fl.request()

			return g.run(cmd, func(ctx context.Context, s *session) error {
				callPeer, defaultNode := peerNode()
				resp, err := s.c.Netstat(s.ctx(ctx), req, callPeer)

				return renderReply(cmd, resp, err, func(resp *machineapi.NetstatResponse) error {
					return renderNetstat(cmd.OutOrStdout(), resp, defaultNode(), fl)
				})
			})
		},
	}

	f := cmd.Flags()
	f.BoolVarP(&fl.verbose, "verbose", "v", false, "display sockets of all supported transport protocols")
	f.BoolVarP(&fl.extend, "extend", "x", false, "show detailed socket information")
	f.BoolVarP(&fl.pid, "programs", "p", false, "show process using socket")
	f.BoolVarP(&fl.timers, "timers", "o", false, "display timers")
	f.BoolVarP(&fl.listening, "listening", "l", false, "display listening server sockets")
	f.BoolVarP(&fl.all, "all", "a", false, "display all sockets states (default: connected)")
	f.BoolVarP(&fl.pods, "pods", "k", false, "show sockets used by Kubernetes pods")
	f.BoolVarP(&fl.tcp, "tcp", "t", false, "display only TCP sockets")
	f.BoolVarP(&fl.udp, "udp", "u", false, "display only UDP sockets")
	f.BoolVarP(&fl.udplite, "udplite", "U", false, "display only UDPLite sockets")
	f.BoolVarP(&fl.raw, "raw", "w", false, "display only RAW sockets")
	f.BoolVarP(&fl.ipv4, "ipv4", "4", false, "display only ipv4 sockets")
	f.BoolVarP(&fl.ipv6, "ipv6", "6", false, "display only ipv6 sockets")

	return cmd
}

// request turns the flags into a NetstatRequest: TCP and UDP unless protocols are named, all
// of them with -v; -4 and -6 narrow the families.
func (fl netstatFlags) request() *machineapi.NetstatRequest {
	p := &machineapi.NetstatRequest_L4Proto{
		Tcp: fl.tcp, Tcp6: fl.tcp, Udp: fl.udp, Udp6: fl.udp,
		Udplite: fl.udplite, Udplite6: fl.udplite, Raw: fl.raw, Raw6: fl.raw,
	}

	if fl.verbose {
		p = &machineapi.NetstatRequest_L4Proto{Tcp: true, Tcp6: true, Udp: true, Udp6: true, Udplite: true, Udplite6: true, Raw: true, Raw6: true}
	}

	if !p.Tcp && !p.Udp && !p.Udplite && !p.Raw {
		p.Tcp, p.Tcp6, p.Udp, p.Udp6 = true, true, true, true
	}

	if fl.ipv4 && !fl.ipv6 {
		p.Tcp6, p.Udp6, p.Udplite6, p.Raw6 = false, false, false, false
	}

	if fl.ipv6 && !fl.ipv4 {
		p.Tcp, p.Udp, p.Udplite, p.Raw = false, false, false, false
	}

	filter := machineapi.NetstatRequest_CONNECTED

	switch {
	case fl.all:
		filter = machineapi.NetstatRequest_ALL
	case fl.listening:
		filter = machineapi.NetstatRequest_LISTENING
	}

	return &machineapi.NetstatRequest{
		Filter:  filter,
		Feature: &machineapi.NetstatRequest_Feature{Pid: fl.pid},
		L4Proto: p,
		Netns:   &machineapi.NetstatRequest_NetNS{Hostnetwork: true, Allnetns: fl.pods},
	}
}

// renderNetstat prints upstream's columns: NODE, Proto, Recv-Q, Send-Q, Local Address,
// Foreign Address, State, then Uid and Inode (-x), PID/Program name (-p), Timer (-o).
func renderNetstat(w io.Writer, resp *machineapi.NetstatResponse, defaultNode string, fl netstatFlags) error {
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)

	labels := []string{"NODE", "Proto", "Recv-Q", "Send-Q", "Local Address", "Foreign Address", "State"}
	if fl.extend {
		labels = append(labels, "Uid", "Inode")
	}

	if fl.pid {
		labels = append(labels, "PID/Program name")
	}

	if fl.timers {
		labels = append(labels, "Timer")
	}

	fmt.Fprintln(tw, strings.Join(labels, "\t"))

	for _, msg := range resp.GetMessages() {
		node := nodeOf(msg.GetMetadata().GetHostname(), defaultNode)

		for _, r := range msg.GetConnectrecord() {
			state := ""
			if r.GetState() != machineapi.ConnectRecord_CLOSE {
				state = r.GetState().String()
			}

			remotePort := "*"
			if r.GetRemoteport() != 0 {
				remotePort = strconv.FormatUint(uint64(r.GetRemoteport()), 10)
			}

			row := []string{
				node, r.GetL4Proto(), strconv.FormatUint(r.GetRxqueue(), 10), strconv.FormatUint(r.GetTxqueue(), 10),
				fmt.Sprintf("%s:%d", r.GetLocalip(), r.GetLocalport()), r.GetRemoteip() + ":" + remotePort, state,
			}

			if fl.extend {
				row = append(row, strconv.FormatUint(uint64(r.GetUid()), 10), strconv.FormatUint(r.GetInode(), 10))
			}

			if fl.pid {
				prog := "-"
				if p := r.GetProcess(); p.GetPid() != 0 {
					prog = fmt.Sprintf("%d/%s", p.GetPid(), p.GetName())
				}

				row = append(row, prog)
			}

			if fl.timers {
				row = append(row, fmt.Sprintf("%s (%.2f/%d/%d)", strings.ToLower(r.GetTr().String()), float64(r.GetTimerwhen())/100, r.GetRetrnsmt(), r.GetTimeout()))
			}

			fmt.Fprintln(tw, strings.Join(row, "\t"))
		}
	}

	return tw.Flush()
}
