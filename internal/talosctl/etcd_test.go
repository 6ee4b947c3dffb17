package talosctl

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	mtype "github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/spf13/cobra"

	"github.com/talos-go/talos/internal/testenv"
)

func TestParseMemberID(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"8e9e05c52164694d", 0x8e9e05c52164694d, true},
		{"0x8E9E05C52164694D", 0x8e9e05c52164694d, true},
		{"1234", 0x1234, true},
		{"0", 0, false},
		{"node1", 0, false},
		{"", 0, false},
	} {
		got, err := parseMemberID(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseMemberID(%q) = %x, %v; want %x, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestRenderEtcd(t *testing.T) {
	var buf bytes.Buffer

	members := &machineapi.EtcdMemberListResponse{Messages: []*machineapi.EtcdMembers{{
		Metadata: &common.Metadata{Hostname: "cp-1"},
		Members: []*machineapi.EtcdMember{
			{Id: 0xabc, Hostname: "cp-1", PeerUrls: []string{"https://10.5.0.2:2380"}, ClientUrls: []string{"https://10.5.0.2:2379"}},
			{Id: 0xdef, Hostname: "cp-2", PeerUrls: []string{"https://10.5.0.3:2380"}, IsLearner: true},
		},
	}}}

	if err := renderEtcdMembers(&buf, members, "fallback"); err != nil {
		t.Fatal(err)
	}

	out := buf.String()
	for _, want := range []string{"NODE", "LEARNER", "0000000000000abc", "cp-2", "https://10.5.0.3:2380", "true"} {
		if !strings.Contains(out, want) {
			t.Errorf("members output lacks %q:\n%s", want, out)
		}
	}

	buf.Reset()

	status := &machineapi.EtcdStatusResponse{Messages: []*machineapi.EtcdStatus{{
		MemberStatus: &machineapi.EtcdMemberStatus{MemberId: 0xabc, Leader: 0xabc, DbSize: 4 << 20, DbSizeInUse: 1 << 20, RaftIndex: 42, ProtocolVersion: "3.6.13"},
	}}}

	if err := renderEtcdStatus(&buf, status, "10.5.0.2"); err != nil {
		t.Fatal(err)
	}

	out = buf.String()
	for _, want := range []string{"10.5.0.2", "0000000000000abc", "4.2 MB", "(25%)", "42", "3.6.13", "<none>"} {
		if !strings.Contains(out, want) {
			t.Errorf("status output lacks %q:\n%s", want, out)
		}
	}

	buf.Reset()

	if err := renderEtcdAlarms(&buf, []alarmRow{{node: "cp-1", alarms: []*machineapi.EtcdMemberAlarm{{MemberId: 0xabc, Alarm: machineapi.EtcdMemberAlarm_NOSPACE}}}}); err != nil {
		t.Fatal(err)
	}

	if !strings.Contains(buf.String(), "NOSPACE") || !strings.Contains(buf.String(), "cp-1") {
		t.Errorf("alarm output:\n%s", buf.String())
	}
}

// runEtcdCommand runs the etcd/bootstrap commands against a machined socket. (They are built
// here directly so the test does not depend on the root command's registration.)
func runEtcdCommand(t *testing.T, sock string, args ...string) (string, string, error) {
	t.Helper()

	g := &Global{MachinedSocket: sock}
	root := &cobra.Command{Use: "talosctl", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(etcdCmd(g), bootstrapCmd(g))

	var out, errOut bytes.Buffer

	root.SetArgs(args)
	root.SetOut(&out)
	root.SetErr(&errOut)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	err := root.ExecuteContext(ctx)

	return out.String(), errOut.String(), err
}

// TestEtcdCommands: bootstrap, members, status, snapshot, alarm, defrag and a refused second
// bootstrap against one machined control plane running our etcd.
func TestEtcdCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("starts machined and etcd")
	}

	testenv.EtcdNextToMachined(t)

	addr := testenv.Loopback(78) + "1"
	n := testenv.StartNode(t, addr, testenv.Config(t, mtype.TypeControlPlane, addr))
	n.WaitConfigured(t, n.Client(t))

	sock := n.Socket()

	if _, _, err := runEtcdCommand(t, sock, "bootstrap"); err != nil {
		t.Fatalf("bootstrap: %v", err)
	}

	var out string

	testenv.WaitFor(t, "etcd status", time.Minute, func() error {
		o, _, err := runEtcdCommand(t, sock, "etcd", "status")
		if err == nil && !strings.Contains(o, "3.6") {
			err = fmt.Errorf("no version 3.6 in %s", o)
		}

		out = o

		return err
	})

	if !strings.Contains(out, "false") { // LEARNER column
		t.Errorf("status:\n%s", out)
	}

	out, _, err := runEtcdCommand(t, sock, "etcd", "members")
	if err != nil || !strings.Contains(out, "https://"+addr+":2380") {
		t.Fatalf("members: %v\n%s", err, out)
	}

	snap := filepath.Join(t.TempDir(), "db.snapshot")

	out, _, err = runEtcdCommand(t, sock, "etcd", "snapshot", snap)
	if err != nil || !strings.Contains(out, "etcd snapshot saved") {
		t.Fatalf("snapshot: %v\n%s", err, out)
	}

	if st, err := os.Stat(snap); err != nil || st.Size()%512 != 32 || st.Mode().Perm() != 0o600 {
		t.Fatalf("snapshot file: %v %v", st, err)
	}

	if out, _, err := runEtcdCommand(t, sock, "etcd", "alarm", "list"); err != nil || !strings.Contains(out, "ALARM") {
		t.Fatalf("alarm list: %v\n%s", err, out)
	}

	if _, _, err := runEtcdCommand(t, sock, "etcd", "defrag"); err != nil {
		t.Fatalf("defrag: %v", err)
	}

	checkEtcdDowngrade(t, sock)

	_, _, err = runEtcdCommand(t, sock, "bootstrap")
	if err == nil || !strings.Contains(err.Error(), "AlreadyExists") {
		t.Fatalf("second bootstrap: got %v, want AlreadyExists", err)
	}

	if _, _, err := runEtcdCommand(t, sock, "etcd", "remove-member", "zz"); err == nil {
		t.Fatal("remove-member with a bad ID accepted")
	}

	// Recover the snapshot into a fresh control plane: a tampered copy is refused, the real
	// one starts a cluster.
	addr2 := testenv.Loopback(78) + "2"
	n2 := testenv.StartNode(t, addr2, testenv.Config(t, mtype.TypeControlPlane, addr2))
	n2.WaitConfigured(t, n2.Client(t))

	data, err := os.ReadFile(snap)
	if err != nil {
		t.Fatal(err)
	}

	data[200] ^= 0xff
	bad := filepath.Join(t.TempDir(), "bad.snapshot")

	if err := os.WriteFile(bad, data, 0o600); err != nil {
		t.Fatal(err)
	}

	_, _, err = runEtcdCommand(t, n2.Socket(), "bootstrap", "--recover-from", bad)
	if err == nil || !strings.Contains(err.Error(), "InvalidArgument") {
		t.Fatalf("recover from a tampered snapshot: got %v, want InvalidArgument", err)
	}

	if _, _, err := runEtcdCommand(t, n2.Socket(), "bootstrap", "--recover-from", snap); err != nil {
		t.Fatalf("bootstrap --recover-from: %v", err)
	}

	testenv.WaitFor(t, "the recovered node listing itself", time.Minute, func() error {
		out, _, err := runEtcdCommand(t, n2.Socket(), "etcd", "members")
		if err == nil && !strings.Contains(out, "https://"+addr2+":2380") {
			err = fmt.Errorf("not in %s", out)
		}

		return err
	})
}
