package server

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Netstat lists the sockets of the node's network namespace from /proc/net (the host's in
// the process mode, which shares it; the node's own in the container mode). Pods' network
// namespaces need containerd and are refused until the node runs it.
func (s *Machine) Netstat(ctx context.Context, req *machine.NetstatRequest) (*machine.NetstatResponse, error) {
	if ns := req.GetNetns(); ns.GetAllnetns() || len(ns.GetNetns()) > 0 {
		return nil, status.Error(codes.Unimplemented, "netns, allnetns: sockets of pod network namespaces need containerd, which this node does not run; ask for hostnetwork")
	}

	var records []*machine.ConnectRecord

	if req.GetNetns() == nil || req.GetNetns().GetHostnetwork() {
		p := req.GetL4Proto()

		for _, t := range []struct {
			name string
			on   bool
		}{
			{"tcp", p.GetTcp()}, {"tcp6", p.GetTcp6()}, {"udp", p.GetUdp()}, {"udp6", p.GetUdp6()},
			{"udplite", p.GetUdplite()}, {"udplite6", p.GetUdplite6()}, {"raw", p.GetRaw()}, {"raw6", p.GetRaw6()},
		} {
			if !t.on {
				continue
			}

			recs, err := readSockets("/proc/self/net", t.name)
			if err != nil {
				return nil, status.Errorf(codes.Internal, "reading /proc/net/%s: %v", t.name, err)
			}

			for _, r := range recs {
				if keepSocket(req.GetFilter(), r) {
					records = append(records, r)
				}
			}
		}
	}

	if req.GetFeature().GetPid() {
		addProcesses(records)
	}

	return &machine.NetstatResponse{Messages: []*machine.Netstat{{Metadata: s.metadata(ctx), Connectrecord: records}}}, nil
}

// keepSocket applies the filter: listening is a TCP socket in LISTEN or an unconnected
// datagram or raw socket; connected is everything else.
func keepSocket(f machine.NetstatRequest_Filter, r *machine.ConnectRecord) bool {
	listening := r.State == machine.ConnectRecord_LISTEN ||
		(!strings.HasPrefix(r.L4Proto, "tcp") && r.State == machine.ConnectRecord_CLOSE)

	switch f {
	case machine.NetstatRequest_ALL:
		return true
	case machine.NetstatRequest_LISTENING:
		return listening
	default:
		return !listening
	}
}

// readSockets parses one /proc/net socket table (proc(5)): sl, local and remote address:port
// in hex, st, tx_queue:rx_queue, tr:tm->when, retrnsmt, uid, timeout, inode, then ref and
// pointer.
func readSockets(dir, proto string) ([]*machine.ConnectRecord, error) {
	f, err := os.Open(filepath.Join(dir, proto))
	if os.IsNotExist(err) {
		return nil, nil // the kernel lacks the protocol (udplite is often left out)
	}

	if err != nil {
		return nil, err
	}
	defer f.Close()

	var out []*machine.ConnectRecord

	sc := bufio.NewScanner(f)
	sc.Scan() // header

	for sc.Scan() {
		r, err := parseSocket(proto, strings.Fields(sc.Text()))
		if err != nil {
			return nil, fmt.Errorf("%q: %w", sc.Text(), err)
		}

		out = append(out, r)
	}

	return out, sc.Err()
}

func parseSocket(proto string, f []string) (*machine.ConnectRecord, error) {
	if len(f) < 10 {
		return nil, fmt.Errorf("%d fields, want at least 10", len(f))
	}

	r := &machine.ConnectRecord{L4Proto: proto}

	var err error

	if r.Localip, r.Localport, err = parseEndpoint(f[1]); err != nil {
		return nil, err
	}

	if r.Remoteip, r.Remoteport, err = parseEndpoint(f[2]); err != nil {
		return nil, err
	}

	hexNum := func(s string) uint64 { n, _ := strconv.ParseUint(s, 16, 64); return n }
	decNum := func(s string) uint64 { n, _ := strconv.ParseUint(s, 10, 64); return n }

	r.State = machine.ConnectRecord_State(hexNum(f[3]))
	tx, rx, _ := strings.Cut(f[4], ":")
	r.Txqueue, r.Rxqueue = hexNum(tx), hexNum(rx)
	tr, when, _ := strings.Cut(f[5], ":")
	r.Tr, r.Timerwhen = machine.ConnectRecord_TimerActive(hexNum(tr)), hexNum(when)
	r.Retrnsmt = hexNum(f[6])
	r.Uid = uint32(decNum(f[7]))
	r.Timeout = decNum(f[8])
	r.Inode = decNum(f[9])

	if len(f) > 11 {
		r.Ref, r.Pointer = decNum(f[10]), hexNum(f[11])
	}

	return r, nil
}

// parseEndpoint decodes "0100007F:1F90": the address as the kernel's 32-bit words printed in
// hex (so in host byte order), and the port.
func parseEndpoint(s string) (string, uint32, error) {
	a, p, ok := strings.Cut(s, ":")
	if !ok {
		return "", 0, fmt.Errorf("address %q has no port", s)
	}

	raw, err := hex.DecodeString(a)
	if err != nil || (len(raw) != 4 && len(raw) != 16) {
		return "", 0, fmt.Errorf("address %q is not 4 or 16 bytes of hex", a)
	}

	ip := make(net.IP, len(raw))
	for i := 0; i < len(raw); i += 4 {
		binary.NativeEndian.PutUint32(ip[i:], binary.BigEndian.Uint32(raw[i:]))
	}

	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return "", 0, fmt.Errorf("port %q: %w", p, err)
	}

	return ip.String(), uint32(port), nil
}

// addProcesses names the process holding each socket, from the socket links in /proc/*/fd.
func addProcesses(records []*machine.ConnectRecord) {
	owners := map[uint64]*machine.ConnectRecord_Process{}

	for _, r := range records {
		owners[r.Inode] = nil
	}

	procs, _ := os.ReadDir("/proc")

	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}

		fds, _ := os.ReadDir(filepath.Join("/proc", p.Name(), "fd"))

		for _, fd := range fds {
			link, err := os.Readlink(filepath.Join("/proc", p.Name(), "fd", fd.Name()))
			if err != nil || !strings.HasPrefix(link, "socket:[") {
				continue
			}

			inode, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]"), 10, 64)
			if err != nil {
				continue
			}

			if owner, wanted := owners[inode]; wanted && owner == nil {
				comm, _ := os.ReadFile(filepath.Join("/proc", p.Name(), "comm"))
				owners[inode] = &machine.ConnectRecord_Process{Pid: uint32(pid), Name: strings.TrimSpace(string(comm))}
			}
		}
	}

	for _, r := range records {
		// Never nil: upstream's talosctl reads the PID without checking.
		if r.Process = owners[r.Inode]; r.Process == nil {
			r.Process = &machine.ConnectRecord_Process{}
		}
	}
}
