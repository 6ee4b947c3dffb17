package server

import (
	"bytes"
	"errors"
	"net"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// defaultSnapLen is the capture length when the request names none (upstream's default).
const defaultSnapLen = 65536

// pcapPoll bounds one blocking read, so a capture notices its caller leaving.
const pcapPoll = 200 * time.Millisecond

// PacketCapture captures packets on one interface of the node's network namespace with an
// AF_PACKET socket, filtered in the kernel by the request's BPF program, and streams them as a
// pcap file until the caller cancels.
func (s *Machine) PacketCapture(req *machine.PacketCaptureRequest, srv grpc.ServerStreamingServer[common.Data]) error {
	iface, err := net.InterfaceByName(req.GetInterface())
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "interface %q: %v (list them with `talosctl get links`)", req.GetInterface(), err)
	}

	snapLen := int(req.GetSnapLen())
	if snapLen == 0 {
		snapLen = defaultSnapLen
	}

	fd, err := captureSocket(iface.Index, req.GetPromiscuous(), req.GetBpfFilter())
	if err != nil {
		return err
	}

	defer unix.Close(fd)

	var out bytes.Buffer

	w := pcapgo.NewWriter(&out)
	if err = w.WriteFileHeader(uint32(snapLen), layers.LinkTypeEthernet); err != nil {
		return status.Errorf(codes.Internal, "writing the pcap header: %v", err)
	}

	md := s.metadata(srv.Context())
	loopback := iface.Flags&net.FlagLoopback != 0
	buf := make([]byte, snapLen)

	for {
		if out.Len() > 0 {
			if err = srv.Send(&common.Data{Metadata: md, Bytes: bytes.Clone(out.Bytes())}); err != nil {
				return err
			}

			out.Reset()
		}

		if srv.Context().Err() != nil {
			return nil
		}

		// MSG_TRUNC: n is the packet's length even when only snapLen bytes were kept.
		n, from, err := unix.Recvfrom(fd, buf, unix.MSG_TRUNC)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue
		}

		if err != nil {
			return status.Errorf(codes.Internal, "capturing on %s: %v", iface.Name, err)
		}

		// On loopback each packet passes twice, going out and coming in: keep one, as libpcap does.
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && loopback && ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}

		captured := min(n, snapLen)

		if err = w.WritePacket(gopacket.CaptureInfo{Timestamp: time.Now(), CaptureLength: captured, Length: n}, buf[:captured]); err != nil {
			return status.Errorf(codes.Internal, "writing a packet: %v", err)
		}
	}
}

// captureSocket opens the AF_PACKET socket: made with protocol 0 so it sees nothing until the
// filter is attached, then bound to the interface for every protocol.
func captureSocket(ifindex int, promiscuous bool, program []*machine.BPFInstruction) (int, error) {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.EPERM) {
			return -1, status.Error(codes.FailedPrecondition, "capturing packets needs CAP_NET_RAW, which machined does not have here")
		}

		return -1, status.Errorf(codes.Internal, "opening a packet socket: %v", err)
	}

	fail := func(what string, err error) (int, error) {
		unix.Close(fd)

		return -1, status.Errorf(codes.Internal, "%s: %v", what, err)
	}

	if len(program) > 0 {
		filter := make([]unix.SockFilter, len(program))
		for i, ins := range program {
			filter[i] = unix.SockFilter{Code: uint16(ins.GetOp()), Jt: uint8(ins.GetJt()), Jf: uint8(ins.GetJf()), K: ins.GetK()}
		}

		if err = unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}); err != nil {
			unix.Close(fd)

			return -1, status.Errorf(codes.InvalidArgument, "bpf_filter: the kernel refused the program: %v", err)
		}
	}

	if err = unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifindex}); err != nil {
		return fail("binding the packet socket", err)
	}

	if promiscuous {
		mreq := &unix.PacketMreq{Ifindex: int32(ifindex), Type: unix.PACKET_MR_PROMISC}
		if err = unix.SetsockoptPacketMreq(fd, unix.SOL_PACKET, unix.PACKET_ADD_MEMBERSHIP, mreq); err != nil {
			return fail("entering promiscuous mode", err)
		}
	}

	tv := unix.NsecToTimeval(pcapPoll.Nanoseconds())
	if err = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return fail("setting the read timeout", err)
	}

	return fd, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
