package talosctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"github.com/packetcap/go-pcap/filter"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/spf13/cobra"
	"golang.org/x/net/bpf"
)

type pcapFlags struct {
	iface, output, bpfFilter string
	promiscuous              bool
	duration                 time.Duration
}

// pcapCmd captures packets on a node's interface through its PacketCapture method: the node
// filters in the kernel with the BPF program compiled here from a tcpdump expression.
func pcapCmd(g *Global) *cobra.Command {
	var fl pcapFlags

	cmd := &cobra.Command{
		Use:     "pcap",
		Aliases: []string{"tcpdump"},
		Short:   "Capture the network packets from the node.",
		Long: `Capture the network packets from the node, to a pcap file (--output file, or - for stdout)
readable by tcpdump and Wireshark, or printed one line a packet without --output.`,
		Example: `talosctl pcap -n 10.5.0.2 -i eth0 --bpf-filter 'udp port 53' --duration 10s -o dns.pcap`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req := &machineapi.PacketCaptureRequest{Interface: fl.iface, Promiscuous: fl.promiscuous, SnapLen: 65536}

			if fl.bpfFilter != "" {
				program, err := compileBPF(fl.bpfFilter)
				if err != nil {
					return fmt.Errorf("--bpf-filter %q: %w", fl.bpfFilter, err)
				}

				req.BpfFilter = program
			}

			return g.run(cmd, func(ctx context.Context, s *session) error {
				if fl.duration > 0 {
					var cancel context.CancelFunc

					ctx, cancel = context.WithTimeout(ctx, fl.duration)
					defer cancel()
				}

				ctx, err := s.single(ctx, "pcap")
				if err != nil {
					return err
				}

				r, err := s.c.PacketCapture(ctx, req)
				if err != nil {
					return fmt.Errorf("PacketCapture: %w", err)
				}

				defer r.Close()

				return fl.write(ctx, cmd.OutOrStdout(), r)
			})
		},
	}

	f := cmd.Flags()
	f.StringVarP(&fl.iface, "interface", "i", "eth0", "interface name to capture packets on")
	f.BoolVar(&fl.promiscuous, "promiscuous", false, "put interface into promiscuous mode")
	f.StringVarP(&fl.output, "output", "o", "", "if not set, decode packets to stdout; if set write raw pcap data to a file, use '-' for stdout")
	f.StringVar(&fl.bpfFilter, "bpf-filter", "", "bpf filter to apply, tcpdump -dd format")
	f.DurationVar(&fl.duration, "duration", 0, "duration of the capture")

	return cmd
}

// compileBPF turns a tcpdump filter expression into the classic BPF program the node attaches.
func compileBPF(expr string) ([]*machineapi.BPFInstruction, error) {
	e := filter.NewExpression(expr)
	if e == nil {
		return nil, errors.New("empty expression")
	}

	f := e.Compile()
	if f == nil {
		return nil, errors.New("not a filter expression")
	}

	ins, err := f.Compile()
	if err != nil {
		return nil, err
	}

	raw, err := bpf.Assemble(ins)
	if err != nil {
		return nil, err
	}

	out := make([]*machineapi.BPFInstruction, len(raw))
	for i, r := range raw {
		out[i] = &machineapi.BPFInstruction{Op: uint32(r.Op), Jt: uint32(r.Jt), Jf: uint32(r.Jf), K: r.K}
	}

	return out, nil
}

// write saves the stream, or decodes it one line a packet. The capture ending with --duration
// is the normal end, not an error.
func (fl pcapFlags) write(ctx context.Context, stdout io.Writer, r io.Reader) error {
	ended := func(err error) error {
		if err == nil || errors.Is(err, io.EOF) || ctx.Err() != nil {
			return nil //nolint:nilerr // a capture that ran out its --duration ended normally
		}

		return err
	}

	switch fl.output {
	case "":
		return ended(decodePackets(stdout, r))
	case "-":
		_, err := io.Copy(stdout, r)

		return ended(err)
	default:
		f, err := os.OpenFile(fl.output, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
		if err != nil {
			return fmt.Errorf("--output: %w", err)
		}

		_, err = io.Copy(f, r)
		if cerr := f.Close(); err == nil || ended(err) == nil {
			err = cerr
		}

		return ended(err)
	}
}

// decodePackets prints time, length, endpoints and layers of each packet.
func decodePackets(w io.Writer, r io.Reader) error {
	pr, err := pcapgo.NewReader(r)
	if err != nil {
		return err
	}

	for {
		data, ci, err := pr.ReadPacketData()
		if err != nil {
			return err
		}

		p := gopacket.NewPacket(data, layers.LayerTypeEthernet, gopacket.Default)

		src, dst := "", ""
		if nl := p.NetworkLayer(); nl != nil {
			src, dst = nl.NetworkFlow().Src().String(), nl.NetworkFlow().Dst().String()
		}

		if tl := p.TransportLayer(); tl != nil {
			src += ":" + tl.TransportFlow().Src().String()
			dst += ":" + tl.TransportFlow().Dst().String()
		}

		var names []string
		for _, l := range p.Layers() {
			names = append(names, l.LayerType().String())
		}

		fmt.Fprintf(w, "%s %s > %s length %d %v\n", ci.Timestamp.Format("15:04:05.000000"), src, dst, ci.Length, names)
	}
}
