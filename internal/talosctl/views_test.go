package talosctl

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/machine"

	"github.com/talos-go/talos/internal/testenv"
)

// TestIntegrationNodeViews: the node's kernel views and network state through talosctl,
// against a real process-mode node: /proc and /sys, netstat, dmesg, cgroups, and the
// network resources (the host's namespace, which the process mode shares; under nsrun a
// private one with only lo).
func TestIntegrationNodeViews(t *testing.T) {
	isolate(t)

	addr := "127.5.20.2"
	n := testenv.StartNode(t, addr, testenv.Config(t, machine.TypeWorker, addr))
	sock := []string{"--machined-socket", n.Socket()}

	out, _ := runUntil(t, ok, append(sock, "read", "/proc/loadavg")...)
	if len(strings.Fields(out)) != 5 {
		t.Errorf("read /proc/loadavg: %q", out)
	}

	out, _ = runUntil(t, ok, append(sock, "ls", "/sys/devices/virtual/net/lo")...)
	mustContain(t, out, "mtu", "operstate")

	// A socket in the namespace the process-mode node shares, with its owner.
	l, err := net.Listen("tcp", addr+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	out, _ = runUntil(t, ok, append(sock, "netstat", "-l", "-t", "-p")...)
	mustContain(t, out, "NODE", "Proto", "Recv-Q", "Send-Q", "Local Address", "Foreign Address", "State", "PID/Program name",
		l.Addr().String(), "LISTEN", fmt.Sprintf("%d/", os.Getpid()))

	code, out, stderr := run(t, append(sock, "dmesg")...)

	switch {
	case os.Getuid() == 0 && (code != 0 || !strings.Contains(out, "local: kern: ")):
		t.Errorf("dmesg as root: code %d %q %s", code, firstLine(out), stderr)
	case os.Getuid() != 0 && code != 0 && !strings.Contains(stderr, "dmesg_restrict"):
		t.Errorf("dmesg refused without saying why: %s", stderr)
	}

	out, _ = runUntil(t, ok, append(sock, "cgroups", "--preset", "memory", "--skip-cri-resolve")...)
	mustContain(t, out, "NAME", "MemCurrent", "MemMax", "\n.")

	out, _ = runUntil(t, ok, append(sock, "get", "links")...)
	mustContain(t, out, "LinkStatus", " lo ")

	out, _ = runUntil(t, ok, append(sock, "get", "addresses")...)
	mustContain(t, out, "AddressStatus", "lo/127.0.0.1/8")

	out, _ = runUntil(t, ok, append(sock, "get", "routes")...)
	mustContain(t, out, "RouteStatus")

	out, _ = runUntil(t, ok, append(sock, "get", "resolvers", "-o", "yaml")...)
	mustContain(t, out, "ResolverStatuses.net.talos.dev", "dnsServers")

	// A process-mode node is reached on its loopback address, whatever the host's links hold.
	out, _ = runUntil(t, ok, append(sock, "get", "nodeaddresses", "current", "-o", "yaml")...)
	mustContain(t, out, addr+"/32")
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")

	return line
}

// TestRenderCgroups renders a small cgroup tree with upstream's presets and a schema file.
func TestRenderCgroups(t *testing.T) {
	root := cgroupTree(t, []struct{ name, content string }{
		{"cgroup/", ""},
		{"cgroup/memory.current", "2097152\n"},
		{"cgroup/cpu.stat", "usage_usec 3000000\nuser_usec 2000000\nsystem_usec 1000000\nthrottled_usec 0\n"},
		{"cgroup/cgroup.procs", "1\n"},
		{"cgroup/io.pressure", "some avg10=1.50 avg60=0.25 avg300=0.00 total=2500000\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"},
		{"cgroup/system/", ""},
		{"cgroup/system/memory.current", "1048576\n"},
		{"cgroup/system/memory.max", "max\n"},
		{"cgroup/system/memory.min", "524288\n"},
		{"cgroup/system/cpu.stat", "user_usec 500000\nsystem_usec 250000\n"},
		{"cgroup/system/cgroup.procs", "42\n43\n"},
		{"cgroup/system/io.stat", "8:0 rbytes=4096 wbytes=8192 rios=1 wios=2\n"},
		{"cgroup/system/etcd/", ""},
		{"cgroup/system/etcd/memory.current", "4096\n"},
		{"cgroup/apid/", ""},
		{"cgroup/apid/sub/", ""}, // under a parent without cpu.stat (a cgroup v1 host's unified tree)
		{"cgroup/apid/sub/cpu.stat", "user_usec 1000\n"},
	})

	names := cgroupNames{procs: map[string]string{"42": "etcd"}, devices: map[string]string{"8:0": "sda"}}

	render := func(schema *compiledSchema) string {
		var out bytes.Buffer
		if err := printCgroups(&out, schema, root, names); err != nil {
			t.Fatal(err)
		}

		return out.String()
	}

	for _, tc := range []struct {
		preset string
		want   []string
	}{
		{"memory", []string{"NAME", "MemCurrent", "Current/Min", "\n.  ", "2.0 MiB", "├──apid", "└──system", "1.0 MiB", "max", "200.00%", "    └──etcd", "4.0 KiB"}},
		{"cpu", []string{"CpuUser", "2s", "500ms", " 25.00%", "└──sub"}},
		{"process", []string{"Procs", "Processes", "[etcd 43]"}},
		{"io", []string{"Bytes Read/Written", "sda: 4.0 KiB/8.0 KiB", "sda: 1/2", "  1.50", "2.5s"}},
	} {
		schema, err := loadCgroupSchema("", tc.preset)
		if err != nil {
			t.Fatal(err)
		}

		got := render(schema)
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("preset %s lacks %q:\n%s", tc.preset, w, got)
			}
		}
	}

	// A schema file, and the errors that name what to fix.
	file := t.TempDir() + "/schema.yaml"
	testenv.WriteFile(t, file, "columns:\n  - name: Current\n    template: '{{ .MemoryCurrent }}'\n", 0o600)

	schema, err := loadCgroupSchema(file, "")
	if err != nil {
		t.Fatal(err)
	}

	if got := render(schema); !strings.Contains(got, "Current") || !strings.Contains(got, "1048576") {
		t.Errorf("schema file:\n%s", got)
	}

	for _, bad := range []struct{ file, preset, want string }{
		{"", "", "either --schema-file or --preset"},
		{"", "bogus", `--preset "bogus": use one of [cpu cpuset io memory process psi swap]`},
	} {
		if _, err := loadCgroupSchema(bad.file, bad.preset); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%q %q: %v", bad.file, bad.preset, err)
		}
	}
}

// cgroupTree reads a tree as `talosctl cgroups` gets it: a gzipped tar of /sys/fs/cgroup.
func cgroupTree(t *testing.T, files []struct{ name, content string }) *cgroupNode {
	t.Helper()

	var buf bytes.Buffer

	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)

	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.content)), Typeflag: tar.TypeReg}
		if strings.HasSuffix(f.name, "/") {
			h.Typeflag, h.Mode = tar.TypeDir, 0o755
		}

		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}

		if _, err := tw.Write([]byte(f.content)); err != nil {
			t.Fatal(err)
		}
	}

	tw.Close()
	gz.Close()

	root, err := readCgroupTree(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}

	return root
}

// The memory and cpu presets show a node's own cgroups as upstream lays them out: a tree with
// the figures a 2-CPU metal node's machined and kubelet set (machined: memory.min, memory.low,
// memory.max and cpu.weight; kubelet: /kubepods and its QoS classes).
func TestRenderCgroupsNodeLayout(t *testing.T) {
	type file = struct{ name, content string }

	files := []file{{"cgroup/", ""}, {"cgroup/cgroup.procs", ""}}

	for _, g := range []struct {
		path           string
		minimum, low   string
		maxMem, weight string
	}{
		{"init", "100663296", "201326592", "max", "79"},
		{"system", "100663296", "201326592", "max", "59"},
		{"system/runtime", "50331648", "100663296", "max", "20"},
		{"system/apid", "16777216", "33554432", "134217728", "20"},
		{"system/trustd", "8388608", "16777216", "25165824", "10"},
		{"podruntime", "0", "0", "max", "79"},
		{"podruntime/etcd", "0", "268435456", "max", "79"},
		{"podruntime/kubelet", "100663296", "201326592", "max", "39"},
		{"kubepods", "0", "0", "1800000000", "77"},
		{"kubepods/besteffort", "0", "0", "max", "1"},
		{"kubepods/burstable", "0", "0", "max", "4"},
	} {
		dir := "cgroup/" + g.path + "/"
		files = append(files, file{dir, ""}, file{dir + "memory.min", g.minimum + "\n"}, file{dir + "memory.low", g.low + "\n"},
			file{dir + "memory.max", g.maxMem + "\n"}, file{dir + "cpu.weight", g.weight + "\n"}, file{dir + "memory.current", "1048576\n"})
	}

	root := cgroupTree(t, files)

	for _, tc := range []struct {
		preset string
		rows   map[string][]string // a row's name, then what its row shows
	}{
		{"memory", map[string][]string{
			"├──init":           {"96 MiB", "192 MiB"},
			"    ├──apid":       {"16 MiB", "32 MiB", "128 MiB"},
			"│   └──kubelet":    {"96 MiB", "192 MiB"},
			"│   ├──etcd":       {"256 MiB"},
			"    └──trustd":     {"8.0 MiB", "16 MiB", "24 MiB"},
			"    ├──runtime":    {"48 MiB", "96 MiB"},
			"├──kubepods":       {"1.7 GiB"},
			"├──podruntime":     {"1.0 MiB"},
			"└──system":         {"96 MiB", "192 MiB"},
			"│   ├──besteffort": nil,
		}},
		{"cpu", map[string][]string{
			"├──init":        {"79"},
			"└──system":      {"59"},
			"├──podruntime":  {"79"},
			"│   ├──etcd":    {"79"},
			"│   └──kubelet": {"39"},
			"    └──trustd":  {"10"},
			"├──kubepods":    {"77"},
		}},
	} {
		schema, err := loadCgroupSchema("", tc.preset)
		if err != nil {
			t.Fatal(err)
		}

		var out bytes.Buffer
		if err := printCgroups(&out, schema, root, cgroupNames{}); err != nil {
			t.Fatal(err)
		}

		for name, want := range tc.rows {
			row := ""

			for line := range strings.Lines(out.String()) {
				if strings.HasPrefix(line, name+" ") {
					row = line
				}
			}

			if row == "" {
				t.Errorf("preset %s: no row %q:\n%s", tc.preset, name, out.String())

				continue
			}

			for _, w := range want {
				if !strings.Contains(row, " "+w) {
					t.Errorf("preset %s: row %q lacks %q", tc.preset, row, w)
				}
			}
		}
	}
}
