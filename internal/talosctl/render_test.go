package talosctl

import (
	"bytes"
	"net"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/formatters"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

var testNow = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

func md(node string) *common.Metadata { return &common.Metadata{Hostname: node} }

// nodeSets gives the single-node and multi-node variants of each golden test.
var nodeSets = map[string][]string{
	"single": {"172.20.0.2"},
	"multi":  {"172.20.0.2", "172.20.0.3"},
}

func TestRenderMemory(t *testing.T) {
	for name, nodes := range nodeSets {
		resp := &machineapi.MemoryResponse{}
		for i, n := range nodes {
			resp.Messages = append(resp.Messages, &machineapi.Memory{Metadata: md(n), Meminfo: &machineapi.MemInfo{
				Memtotal: 4 << 20, Memfree: uint64(1+i) << 20, Cached: 512 << 10, Buffers: 128 << 10, Shmem: 64 << 10, Memavailable: 3 << 20,
			}})
		}

		var buf bytes.Buffer
		if err := renderMemory(&buf, resp, ""); err != nil {
			t.Fatal(err)
		}

		golden(t, "memory-"+name+".txt", buf.String())
	}
}

func TestRenderProcesses(t *testing.T) {
	for name, nodes := range nodeSets {
		resp := &machineapi.ProcessesResponse{}
		for _, n := range nodes {
			resp.Messages = append(resp.Messages, &machineapi.Process{Metadata: md(n), Processes: []*machineapi.ProcessInfo{
				{Pid: 1, State: "S", Threads: 12, CpuTime: 3.5, VirtualMemory: 1 << 30, ResidentMemory: 60 << 20, Command: "init", Executable: "/sbin/init", Args: "/sbin/init"},
				{Pid: 500, State: "R", Threads: 40, CpuTime: 120.25, VirtualMemory: 2 << 30, ResidentMemory: 300 << 20, Command: "etcd", Executable: "/usr/local/bin/etcd", Args: "etcd --name=x"},
				{Pid: 2, State: "S", Threads: 1, Command: "kthreadd"},
			}})
		}

		for _, sortBy := range []string{"rss", "cpu"} {
			var buf bytes.Buffer
			if err := renderProcesses(&buf, resp, "", sortBy); err != nil {
				t.Fatal(err)
			}

			golden(t, "processes-"+sortBy+"-"+name+".txt", buf.String())
		}
	}
}

func serviceList(nodes []string) *machineapi.ServiceListResponse {
	resp := &machineapi.ServiceListResponse{}

	for _, n := range nodes {
		resp.Messages = append(resp.Messages, &machineapi.ServiceList{Metadata: md(n), Services: []*machineapi.ServiceInfo{
			{Id: "apid", State: "Running", Health: &machineapi.ServiceHealth{Healthy: true}, Events: &machineapi.ServiceEvents{Events: []*machineapi.ServiceEvent{
				{Msg: "Starting", State: "Starting", Ts: timestamppb.New(testNow.Add(-time.Hour))},
				{Msg: "Health check successful", State: "Running", Ts: timestamppb.New(testNow.Add(-59 * time.Minute))},
			}}},
			{Id: "etcd", State: "Waiting", Health: &machineapi.ServiceHealth{Unknown: true}, Events: &machineapi.ServiceEvents{}},
			{Id: "kubelet", State: "Running", Health: &machineapi.ServiceHealth{LastMessage: "connection refused"}, Events: &machineapi.ServiceEvents{Events: []*machineapi.ServiceEvent{
				{Msg: "Health check failed: connection refused", State: "Running", Ts: timestamppb.New(testNow.Add(-5 * time.Second))},
			}}},
		}})
	}

	return resp
}

func TestRenderServices(t *testing.T) {
	for name, nodes := range nodeSets {
		var buf bytes.Buffer
		if err := renderServices(&buf, serviceList(nodes), "", testNow); err != nil {
			t.Fatal(err)
		}

		golden(t, "services-"+name+".txt", buf.String())

		buf.Reset()

		if err := renderServiceInfo(&buf, serviceList(nodes), "apid", "", testNow); err != nil {
			t.Fatal(err)
		}

		golden(t, "service-apid-"+name+".txt", buf.String())
	}

	if err := renderServiceInfo(&bytes.Buffer{}, serviceList(nodeSets["single"]), "nope", "", testNow); err == nil {
		t.Error("an unknown service must be an error")
	}
}

func TestRenderServiceAction(t *testing.T) {
	var buf bytes.Buffer

	msgs := []*machineapi.ServiceRestart{{Metadata: md("172.20.0.2"), Resp: `Service "kubelet" restarted`}, {Metadata: md("172.20.0.3"), Resp: `Service "kubelet" restarted`}}
	if err := renderServiceAction(&buf, msgs, ""); err != nil {
		t.Fatal(err)
	}

	golden(t, "service-restart-multi.txt", buf.String())
}

func TestRenderVersion(t *testing.T) {
	for name, nodes := range nodeSets {
		resp := &machineapi.VersionResponse{}
		for _, n := range nodes {
			resp.Messages = append(resp.Messages, &machineapi.Version{
				Metadata: md(n),
				Version:  &machineapi.VersionInfo{Tag: "v1.11.0", Sha: "abcdef0", GoVersion: "go1.24.6", Os: "linux", Arch: "amd64"},
				Features: &machineapi.FeaturesInfo{Rbac: true},
			})
		}

		var buf bytes.Buffer
		if err := renderVersion(&buf, resp, ""); err != nil {
			t.Fatal(err)
		}

		golden(t, "version-"+name+".txt", buf.String())
	}
}

func TestRenderVersionDefaultNode(t *testing.T) {
	var buf bytes.Buffer

	resp := &machineapi.VersionResponse{Messages: []*machineapi.Version{{Version: &machineapi.VersionInfo{Tag: "v1"}}}}
	if err := renderVersion(&buf, resp, "10.5.0.2"); err != nil {
		t.Fatal(err)
	}

	mustContain(t, buf.String(), "NODE:        10.5.0.2")
}

func TestRenderMounts(t *testing.T) {
	// upstream's formatter, fed through our reply: NODE column from metadata.
	for name, nodes := range nodeSets {
		resp := &machineapi.MountsResponse{}
		for _, n := range nodes {
			resp.Messages = append(resp.Messages, &machineapi.Mounts{Metadata: md(n), Stats: []*machineapi.MountStat{
				{Filesystem: "/dev/sda6", Size: 10e9, Available: 7.5e9, MountedOn: "/var"},
			}})
		}

		var buf bytes.Buffer
		if err := formatters.RenderMounts(resp, &buf, &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 50000}}); err != nil {
			t.Fatal(err)
		}

		golden(t, "mounts-"+name+".txt", buf.String())
	}
}

func TestRenderList(t *testing.T) {
	for name, nodes := range nodeSets {
		var infos []*machineapi.FileInfo
		for _, n := range nodes {
			infos = append(infos,
				&machineapi.FileInfo{Metadata: md(n), Name: "/etc", RelativeName: ".", IsDir: true, Mode: uint32(0o755 | 1<<31), Size: 4096, Modified: testNow.Unix()},
				&machineapi.FileInfo{Metadata: md(n), Name: "/etc/hosts", RelativeName: "hosts", Mode: 0o644, Size: 120, Modified: testNow.Unix()},
				&machineapi.FileInfo{Metadata: md(n), Name: "/etc/localtime", RelativeName: "localtime", Mode: uint32(0o777 | 1<<27), Link: "/usr/share/zoneinfo/UTC", Modified: testNow.Unix()},
			)
		}

		for _, long := range []bool{false, true} {
			var buf, errBuf bytes.Buffer
			if !renderList(&buf, &errBuf, infos, listOptions{long: long, loc: time.UTC}) {
				t.Fatalf("unexpected failure: %s", errBuf.String())
			}

			suffix := ""
			if long {
				suffix = "-long"
			}

			golden(t, "ls"+suffix+"-"+name+".txt", buf.String())
		}
	}
}

func TestRenderListErrors(t *testing.T) {
	infos := []*machineapi.FileInfo{
		{Metadata: md("172.20.0.2"), Name: "/x", RelativeName: "."},
		{Metadata: &common.Metadata{Hostname: "172.20.0.3", Error: "connection refused"}},
		{Metadata: md("172.20.0.2"), Name: "/x/y", Error: "permission denied"},
	}

	var buf, errBuf bytes.Buffer
	if renderList(&buf, &errBuf, infos, listOptions{loc: time.UTC}) {
		t.Error("errors must make the listing fail")
	}

	mustContain(t, errBuf.String(), "172.20.0.3: connection refused", "/x/y: permission denied")
	mustContain(t, buf.String(), "172.20.0.2   .")
}

func TestLogWriter(t *testing.T) {
	var out, errOut bytes.Buffer

	lw := newLogWriter(&out, &errOut)
	lw.write(&common.Data{Metadata: md("172.20.0.2"), Bytes: []byte("first line\nsecond ")})
	lw.write(&common.Data{Metadata: md("172.20.0.3"), Bytes: []byte("other node\n")})
	lw.write(&common.Data{Metadata: md("172.20.0.2"), Bytes: []byte("half\nunterminated")})
	lw.write(&common.Data{Metadata: &common.Metadata{Hostname: "172.20.0.4", Error: "service not found"}})
	lw.flush()

	golden(t, "logs-multi.txt", out.String())
	mustContain(t, errOut.String(), "error: 172.20.0.4: service not found")

	if !lw.failed {
		t.Error("a node error must fail the command")
	}
}

func TestEventWriter(t *testing.T) {
	var out, errOut bytes.Buffer

	ew := newEventWriter(&out, &errOut)

	add := func(node, id string, msg proto.Message) {
		a, err := anypb.New(msg)
		if err != nil {
			t.Fatal(err)
		}

		a.TypeUrl = "talos/runtime/" + string(msg.ProtoReflect().Descriptor().FullName())
		ew.write(&machineapi.Event{Metadata: md(node), Id: id, Data: a, ActorId: "actor1"})
	}

	add("172.20.0.2", "c1", &machineapi.SequenceEvent{Sequence: "boot", Action: machineapi.SequenceEvent_START})
	add("172.20.0.3", "c2", &machineapi.ServiceStateEvent{Service: "etcd", Action: machineapi.ServiceStateEvent_RUNNING, Message: "Health check successful"})
	add("172.20.0.2", "c3", &machineapi.PhaseEvent{Phase: "install", Action: machineapi.PhaseEvent_STOP})
	ew.write(&machineapi.Event{Metadata: &common.Metadata{Hostname: "172.20.0.4", Error: "unreachable"}})

	golden(t, "events-multi.txt", out.String())
	mustContain(t, errOut.String(), "172.20.0.4: unreachable")
}
