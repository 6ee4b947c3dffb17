package server

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/talos-go/talos/internal/machined/resources"
	"github.com/talos-go/talos/internal/machined/runtime"
)

// serveViews serves a Machine for a node rooted at root ("/" for a node with its own root
// and namespaces, a folder for a process-mode node) on a unix socket, and returns a client.
func serveViews(t *testing.T, root string) *client.Client {
	t.Helper()

	st, err := resources.NewState(t.Context())
	if err != nil {
		t.Fatal(err)
	}

	mode := runtime.Mode{Kind: runtime.Process}
	if root == "/" {
		mode.Kind = runtime.Container
	}

	return serveMachine(t, &Machine{R: &runtime.Runtime{Mode: mode, Paths: runtime.Paths{Root: root}, State: st}})
}

// serveMachine serves m on a unix socket and returns a client.
func serveMachine(t *testing.T, m *Machine) *client.Client {
	t.Helper()

	sock := filepath.Join(t.TempDir(), "m.sock")

	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}

	srv := grpc.NewServer()
	machine.RegisterMachineServiceServer(srv, m)

	go srv.Serve(l)

	t.Cleanup(srv.Stop)

	c, err := client.New(t.Context(), client.WithUnixSocket(sock), client.WithGRPCDialOptions(grpc.WithTransportCredentials(insecure.NewCredentials())))
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { c.Close() })

	return c
}

func readAll(r io.ReadCloser, err error) (string, error) {
	if err != nil {
		return "", err
	}
	defer r.Close()

	b, err := io.ReadAll(r)

	return string(b), err
}

// untar reads a Copy archive into name → content.
func untar(r io.ReadCloser, err error) (map[string]string, error) {
	if err != nil {
		return nil, err
	}
	defer r.Close()

	gz, err := gzip.NewReader(r)
	if err != nil {
		return nil, err
	}

	out := map[string]string{}
	tr := tar.NewReader(gz)

	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}

		if err != nil {
			return out, err
		}

		b, err := io.ReadAll(tr)
		if err != nil {
			return out, err
		}

		out[h.Name] = string(b)
	}
}

// TestFileViews: /proc and /sys are served read-only to read, ls and copy; a process-mode
// node's other paths are its state folder's, not the host's.
func TestFileViews(t *testing.T) {
	c := serveViews(t, t.TempDir())
	ctx := t.Context()

	loadavg, err := readAll(c.Read(ctx, "/proc/loadavg"))
	if err != nil || len(strings.Fields(loadavg)) != 5 {
		t.Errorf("read /proc/loadavg: %q %v", loadavg, err)
	}

	mtu, err := readAll(c.Read(ctx, "/sys/devices/virtual/net/lo/mtu"))
	if err != nil || mtu != "65536\n" {
		t.Errorf("read lo's mtu: %q %v", mtu, err)
	}

	if _, err = readAll(c.Read(ctx, "/etc/hostname")); status.Code(err) != codes.NotFound {
		t.Errorf("a process-mode node has no /etc of its own: %v", err)
	}

	ls, err := c.LS(ctx, &machine.ListRequest{Root: "/proc/self"})
	if err != nil {
		t.Fatal(err)
	}

	var names []string

	for {
		fi, err := ls.Recv()
		if err != nil {
			break
		}

		names = append(names, fi.GetName())
	}

	if !slices.Contains(names, "/proc/self/status") {
		t.Errorf("ls /proc/self: %v", names)
	}

	// sysfs reports 4096 bytes for every file: the archive holds the content.
	lo, err := untar(c.Copy(ctx, "/sys/devices/virtual/net/lo"))
	if err != nil || lo["lo/mtu"] != "65536\n" || lo["lo/operstate"] == "" {
		t.Errorf("copy of lo's sysfs folder: mtu %q operstate %q %v", lo["lo/mtu"], lo["lo/operstate"], err)
	}

	// procfs reports 0 bytes, and holds files nobody may read: the copy still completes.
	self, err := untar(c.Copy(ctx, "/proc/self"))
	if err != nil || !strings.HasPrefix(self["self/status"], "Name:") {
		t.Errorf("copy of /proc/self: status %q (%d entries) %v", self["self/status"], len(self), err)
	}
}

// TestOwnRootViews: a node with its own root sees its paths as they are, and its own mounts.
func TestOwnRootViews(t *testing.T) {
	c := serveViews(t, "/")

	hostname, err := readAll(c.Read(t.Context(), "/proc/sys/kernel/hostname"))
	if err != nil || hostname == "" {
		t.Errorf("read the kernel hostname: %q %v", hostname, err)
	}

	passwd, err := readAll(c.Read(t.Context(), "/etc/passwd"))
	if err != nil || !strings.Contains(passwd, "root:") {
		t.Errorf("read /etc/passwd of the node's root: %v", err)
	}

	mounts, err := c.Mounts(t.Context())
	if err != nil {
		t.Fatal(err)
	}

	if !slices.ContainsFunc(mounts.GetMessages()[0].GetStats(), func(m *machine.MountStat) bool { return m.GetMountedOn() == "/" }) {
		t.Errorf("mounts of the node's own namespace lack /: %v", mounts)
	}
}

func TestProcessesSharedAndOwn(t *testing.T) {
	pids := func(c *client.Client) []int32 {
		resp, err := c.Processes(t.Context())
		if err != nil {
			t.Fatal(err)
		}

		var out []int32
		for _, p := range resp.GetMessages()[0].GetProcesses() {
			out = append(out, p.GetPid())
		}

		return out
	}

	self := int32(os.Getpid())

	// A process-mode node is machined (here the test) and its descendants, never the host's init.
	if shared := pids(serveViews(t, t.TempDir())); !slices.Contains(shared, self) || slices.Contains(shared, 1) {
		t.Errorf("process mode: %v", shared)
	}

	// A node with its own PID namespace shows all of it.
	if own := pids(serveViews(t, "/")); !slices.Contains(own, self) || !slices.Contains(own, 1) {
		t.Errorf("own namespace: %v", own)
	}
}

func TestNetstat(t *testing.T) {
	c := serveViews(t, t.TempDir())

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	port := uint32(l.Addr().(*net.TCPAddr).Port)

	conn, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	records := func(filter machine.NetstatRequest_Filter) []*machine.ConnectRecord {
		resp, err := c.Netstat(t.Context(), &machine.NetstatRequest{
			Filter:  filter,
			Feature: &machine.NetstatRequest_Feature{Pid: true},
			L4Proto: &machine.NetstatRequest_L4Proto{Tcp: true, Tcp6: true},
			Netns:   &machine.NetstatRequest_NetNS{Hostnetwork: true},
		})
		if err != nil {
			t.Fatal(err)
		}

		return resp.GetMessages()[0].GetConnectrecord()
	}

	listening := records(machine.NetstatRequest_LISTENING)
	if !slices.ContainsFunc(listening, func(r *machine.ConnectRecord) bool {
		return r.Localip == "127.0.0.1" && r.Localport == port && r.State == machine.ConnectRecord_LISTEN &&
			r.L4Proto == "tcp" && r.GetProcess().GetPid() == uint32(os.Getpid())
	}) {
		t.Errorf("no listening record for 127.0.0.1:%d owned by this process: %v", port, listening)
	}

	connected := records(machine.NetstatRequest_CONNECTED)
	if !slices.ContainsFunc(connected, func(r *machine.ConnectRecord) bool {
		return r.Remoteport == port && r.State == machine.ConnectRecord_ESTABLISHED
	}) || slices.ContainsFunc(connected, func(r *machine.ConnectRecord) bool { return r.State == machine.ConnectRecord_LISTEN }) {
		t.Errorf("connected: %v", connected)
	}

	_, err = c.Netstat(t.Context(), &machine.NetstatRequest{Netns: &machine.NetstatRequest_NetNS{Allnetns: true}})
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("pod namespaces: %v", err)
	}
}

func TestParseEndpoint(t *testing.T) {
	for in, want := range map[string]string{
		"0100007F:1F90":                         "127.0.0.1:8080",
		"00000000:0016":                         "0.0.0.0:22",
		"00000000000000000000000001000000:0035": "[::1]:53",
		"B80D0120000000000000000001000000:01BB": "[2001:db8::1]:443",
	} {
		ip, port, err := parseEndpoint(in)
		if err != nil || net.JoinHostPort(ip, strconv.Itoa(int(port))) != want {
			t.Errorf("%s: got %s:%d %v, want %s", in, ip, port, err, want)
		}
	}

	for _, bad := range []string{"0100007F", "01007F:0016", "zz00007F:0016", "0100007F:10000"} {
		if _, _, err := parseEndpoint(bad); err == nil {
			t.Errorf("%s: want an error", bad)
		}
	}
}

func TestDmesg(t *testing.T) {
	// Refused by the kernel: the error says why and what would allow it.
	err := kmsgError(&os.PathError{Op: "open", Path: "/dev/kmsg", Err: syscall.EPERM})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "dmesg_restrict") {
		t.Errorf("permission error: %v", err)
	}

	if os.Getuid() != 0 {
		t.Skip("reading and writing /dev/kmsg needs root here")
	}

	c := serveViews(t, t.TempDir())

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	// Follow from the tail: a line written now arrives, and nothing older.
	s, err := c.Dmesg(ctx, true, true)
	if err != nil {
		t.Fatal(err)
	}

	mark := "talos-go dmesg test " + time.Now().Format(time.RFC3339Nano)

	// The server answers with headers once its reader stands at the tail.
	if md, err := s.Header(); err != nil || md == nil {
		t.Fatalf("no headers: %v", err)
	}

	if err = os.WriteFile("/dev/kmsg", []byte("<6>"+mark+"\n"), 0); err != nil {
		t.Fatal(err)
	}

	for {
		d, err := s.Recv()
		if err != nil {
			t.Fatalf("stream ended before the line: %v", err)
		}

		line := string(d.GetBytes())
		if strings.Contains(line, mark) {
			if !strings.HasPrefix(line, "user:    info: [") && !strings.HasPrefix(line, "kern:    info: [") {
				t.Errorf("line not in upstream's format: %q", line)
			}

			break
		}
	}

	cancel()

	// Without follow the stream ends by itself, and holds the line.
	all, err := c.Dmesg(t.Context(), false, false)
	if err != nil {
		t.Fatal(err)
	}

	found := false

	for {
		d, err := all.Recv()
		if errors.Is(err, io.EOF) {
			break
		}

		if err != nil {
			t.Fatal(err)
		}

		found = found || strings.Contains(string(d.GetBytes()), mark)
	}

	if !found {
		t.Error("the whole log lacks the line written")
	}
}
