package bootloader

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/talos-go/talos/internal/imager"
	"github.com/talos-go/talos/internal/meta"
	"github.com/talos-go/talos/internal/slots"
	"github.com/talos-go/talos/internal/testenv"
)

// The test binary doubles as a fake machined in the slots: a slot's "machined" is a script that
// runs this binary with BOOTTEST_ROLE set. Each boot appends the slot to state/boots.
func TestMain(m *testing.M) {
	if role := os.Getenv("BOOTTEST_ROLE"); role != "" {
		os.Exit(fakeMachined(role))
	}

	os.Exit(m.Run())
}

func fakeMachined(role string) int {
	var state string

	for i, a := range os.Args {
		if a == "--state" && i+1 < len(os.Args) {
			state = os.Args[i+1]
		}
	}

	slot := slots.Current()
	if state == "" || slot == "" || os.Getenv(EnvBootStage) == "" {
		fmt.Fprintln(os.Stderr, "fake machined: missing --state or boot stage environment")

		return 2
	}

	f, _ := os.OpenFile(filepath.Join(state, "boots"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	fmt.Fprintln(f, slot)
	f.Close()

	switch role {
	case "good":
		store, _ := meta.Open(filepath.Join(state, "META"))
		if _, err := slots.MarkBootSuccessful(store, slot); err != nil {
			return 2
		}

		// Each line in state/reboots asks for one reboot; without any the node shuts down.
		data, _ := os.ReadFile(filepath.Join(state, "reboots"))
		if len(data) > 0 {
			os.WriteFile(filepath.Join(state, "reboots"), data[1:], 0o600)

			return ExitReboot
		}

		return 0
	case "crash":
		return 3
	case "good-then-crash":
		// Confirms its boot, then takes the next letter of state/crashes: x dies by SIGKILL, r
		// asks for a reboot; with none left it shuts down.
		store, _ := meta.Open(filepath.Join(state, "META"))
		if _, err := slots.MarkBootSuccessful(store, slot); err != nil {
			return 2
		}

		data, _ := os.ReadFile(filepath.Join(state, "crashes"))
		if len(data) == 0 {
			return 0
		}

		os.WriteFile(filepath.Join(state, "crashes"), data[1:], 0o600)

		if data[0] == 'r' {
			return ExitReboot
		}

		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	case "reboot-before-ok":
		return ExitReboot
	case "hang":
		select {} // until the boot stage's watchdog stops it
	}

	return 2
}

type testNode struct {
	state string
	log   *testenv.SyncBuffer
}

func newTestNode(t *testing.T) *testNode {
	t.Helper()

	return &testNode{state: t.TempDir(), log: &testenv.SyncBuffer{}}
}

func slotScript(t *testing.T, path, role string) {
	t.Helper()

	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}

	script := fmt.Sprintf("#!/bin/sh\nBOOTTEST_ROLE=%s exec %q \"$@\"\n", role, self)

	if err = os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}

	if err = os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
}

func (n *testNode) slot(t *testing.T, slot, role string) {
	t.Helper()
	slotScript(t, SlotBinary(filepath.Join(n.state, "BOOT"), slot), role)
}

func (n *testNode) meta(t *testing.T) *meta.Store {
	t.Helper()

	s, err := meta.Open(filepath.Join(n.state, "META"))
	if err != nil {
		t.Fatal(err)
	}

	return s
}

func (n *testNode) run(t *testing.T, extra ...string) error {
	t.Helper()

	o, err := parseArgs(append([]string{"--state", n.state, "--address", "127.5.0.9"}, extra...))
	if err != nil {
		t.Fatal(err)
	}

	o.Log = n.log
	o.CrashPause = time.Millisecond

	return Run(context.Background(), o)
}

func (n *testNode) boots(t *testing.T) string {
	t.Helper()

	data, _ := os.ReadFile(filepath.Join(n.state, "boots"))

	return strings.Join(strings.Fields(string(data)), ",")
}

func TestBootStage(t *testing.T) {
	for _, tc := range []struct {
		name      string
		a, b      string // roles of the slots ("" = empty)
		meta      []string
		reboots   int
		extra     []string
		wantBoots string
		wantMeta  map[string]string
		fallback  bool
	}{
		{name: "active slot", a: "good", b: "good", wantBoots: "A", wantMeta: map[string]string{meta.ActiveSlot: slots.A}},
		{name: "active slot B after reboot", a: "good", b: "good", meta: []string{meta.ActiveSlot, slots.B}, reboots: 1, wantBoots: "B,B"},
		{name: "upgrade: boot-once then permanent", a: "good", b: "good", meta: []string{meta.ActiveSlot, slots.A, meta.BootOnce, slots.B}, reboots: 1,
			wantBoots: "B,B", wantMeta: map[string]string{meta.ActiveSlot: slots.B, meta.TrialSlot: "", meta.BootOnce: ""}},
		{name: "new slot crashes: fallback", a: "good", b: "crash", meta: []string{meta.ActiveSlot, slots.A, meta.BootOnce, slots.B},
			wantBoots: "B,A", wantMeta: map[string]string{meta.ActiveSlot: slots.A, meta.TrialSlot: ""}, fallback: true},
		{name: "new slot reboots before reporting: fallback", a: "good", b: "reboot-before-ok", meta: []string{meta.ActiveSlot, slots.A, meta.BootOnce, slots.B},
			wantBoots: "B,A", wantMeta: map[string]string{meta.ActiveSlot: slots.A}, fallback: true},
		{name: "new slot hangs: watchdog fallback", a: "good", b: "hang", meta: []string{meta.ActiveSlot, slots.A, meta.BootOnce, slots.B},
			extra: []string{"--boot-timeout", "5s"}, wantBoots: "B,A", wantMeta: map[string]string{meta.ActiveSlot: slots.A}, fallback: true},
		{name: "interrupted trial found on next start", a: "good", b: "good", meta: []string{meta.ActiveSlot, slots.A, meta.TrialSlot, slots.B},
			wantBoots: "A", wantMeta: map[string]string{meta.ActiveSlot: slots.A, meta.TrialSlot: ""}, fallback: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newTestNode(t)

			if tc.a != "" {
				n.slot(t, slots.A, tc.a)
			}

			if tc.b != "" {
				n.slot(t, slots.B, tc.b)
			}

			if len(tc.meta) > 0 {
				if err := n.meta(t).Set(tc.meta...); err != nil {
					t.Fatal(err)
				}
			}

			// Leftovers of an interrupted upgrade are cleared.
			leftover := filepath.Join(n.state, "BOOT", ".staging-B.tmp-123", "machined")
			if err := os.MkdirAll(filepath.Dir(leftover), 0o700); err != nil {
				t.Fatal(err)
			}

			if tc.reboots > 0 {
				os.WriteFile(filepath.Join(n.state, "reboots"), []byte(strings.Repeat("x", tc.reboots)), 0o600)
			}

			if err := n.run(t, tc.extra...); err != nil {
				t.Fatalf("boot stage: %v\n%s", err, n.log)
			}

			if _, err := os.Stat(filepath.Dir(leftover)); !os.IsNotExist(err) {
				t.Fatalf("leftover staging folder kept: %v", err)
			}

			if got := n.boots(t); got != tc.wantBoots {
				t.Fatalf("boots %q, want %q\n%s", got, tc.wantBoots, n.log)
			}

			v, _ := n.meta(t).Read()
			for k, want := range tc.wantMeta {
				if v[k] != want {
					t.Fatalf("META %s=%q, want %q (all: %v)", k, v[k], want, v)
				}
			}

			if got := v[meta.Fallback] != ""; got != tc.fallback {
				t.Fatalf("fallback recorded %v (%q), want %v", got, v[meta.Fallback], tc.fallback)
			}
		})
	}
}

// A crash of machined (kill -9) after a successful boot is a reboot, as a PID 1 crash on a real
// machine; a crash loop ends the boot stage with the error.
func TestBootStageCrashIsReboot(t *testing.T) {
	loop := strings.Repeat("x", CrashLimit)

	for _, tc := range []struct {
		name      string
		script    string // per boot: x crash, r reboot; then shutdown
		wantBoots int
		wantErr   string
	}{
		{name: "one crash", script: "x", wantBoots: 2},
		{name: "crashes up to the limit", script: loop, wantBoots: CrashLimit + 1},
		{name: "crash loop", script: loop + "x", wantBoots: CrashLimit + 1, wantErr: "crash loop"},
		{name: "a reboot between crashes starts a new count", script: loop + "r" + loop, wantBoots: 2*CrashLimit + 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newTestNode(t)
			n.slot(t, slots.A, "good-then-crash")
			os.WriteFile(filepath.Join(n.state, "crashes"), []byte(tc.script), 0o600)

			err := n.run(t)

			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("boot stage: %v\n%s", err, n.log)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "signal: killed")):
				t.Fatalf("boot stage error %v, want one naming %q and the signal\n%s", err, tc.wantErr, n.log)
			}

			if want := strings.TrimSuffix(strings.Repeat("A,", tc.wantBoots), ","); n.boots(t) != want {
				t.Fatalf("boots %q, want %q\n%s", n.boots(t), want, n.log)
			}

			if !strings.Contains(n.log.String(), "crashed (signal: killed) after ") {
				t.Fatalf("no crash line in the boot log:\n%s", n.log)
			}
		})
	}
}

// A reset that left etcd and died before its wipe is finished by the boot stage.
func TestBootStageFinishesInterruptedReset(t *testing.T) {
	n := newTestNode(t)
	n.slot(t, slots.A, "good")

	for _, f := range []string{"EPHEMERAL/lib/etcd/member/wal/0.wal", "STATE/config.yaml"} {
		testenv.WriteFile(t, filepath.Join(n.state, f), "x", 0o600)
	}

	if err := n.meta(t).Set(meta.ResetWipe, "EPHEMERAL,META"); err != nil {
		t.Fatal(err)
	}

	if err := n.run(t); err != nil {
		t.Fatalf("boot stage: %v\n%s", err, n.log)
	}

	if _, err := os.Stat(filepath.Join(n.state, "EPHEMERAL/lib")); !os.IsNotExist(err) {
		t.Fatalf("EPHEMERAL not wiped: %v\n%s", err, n.log)
	}

	if _, err := os.Stat(filepath.Join(n.state, "STATE/config.yaml")); err != nil {
		t.Fatalf("STATE was not to be wiped: %v", err)
	}

	if v, _ := n.meta(t).Read(); v[meta.ResetWipe] != "" || v[meta.ActiveSlot] != slots.A {
		t.Fatalf("META after finishing the reset: %v", v)
	}
}

func TestBootStagePassesArgs(t *testing.T) {
	o, err := parseArgs([]string{"--state", "/x", "--platform", "container", "--boot-timeout=2m", "--address", "127.0.0.9", "--image", "/i.img"})
	if err != nil {
		t.Fatal(err)
	}

	if o.BootTimeout != 2*time.Minute || o.Image != "/i.img" || o.StateDir != "/x" {
		t.Fatalf("options %+v", o)
	}

	if got := strings.Join(o.MachinedArgs, " "); got != "--state /x --platform container --address 127.0.0.9" {
		t.Fatalf("machined args %q", got)
	}

	if _, err = parseArgs([]string{"--address", "127.0.0.9"}); err == nil || !strings.Contains(err.Error(), "--state is required") {
		t.Fatalf("no --state: %v", err)
	}
}

func TestInstallFromImage(t *testing.T) {
	n := newTestNode(t)
	dir := t.TempDir()

	pub, err := imager.GenerateKey(filepath.Join(dir, "k.key"), filepath.Join(dir, "k.pub"))
	if err != nil {
		t.Fatal(err)
	}

	priv, _ := imager.LoadPrivateKey(filepath.Join(dir, "k.key"))
	slotScript(t, filepath.Join(dir, "machined"), "good")
	os.WriteFile(filepath.Join(dir, "etcd"), []byte("etcd"), 0o755)

	img := filepath.Join(dir, "node.img")
	if _, err = imager.BuildFile(img, imager.BuildOptions{Version: "v1.2.3", Key: priv, Compress: true,
		Files: map[string]string{"machined": filepath.Join(dir, "machined"), "etcd": filepath.Join(dir, "etcd")}}); err != nil {
		t.Fatal(err)
	}

	// Without trusted keys the install is refused and BOOT stays empty.
	err = n.run(t, "--image", img)
	if err == nil || !strings.Contains(err.Error(), "no trusted image keys") {
		t.Fatalf("install without trusted keys: %v", err)
	}

	if SlotInstalled(filepath.Join(n.state, "BOOT"), slots.A) {
		t.Fatal("refused image was installed")
	}

	// A private key given as trusted key is refused.
	if err = n.run(t, "--image", img, "--image-keys", filepath.Join(dir, "k.key")); err == nil || !strings.Contains(err.Error(), "not a public key") {
		t.Fatalf("private key as --image-keys: %v", err)
	}

	if err = n.run(t, "--image", img, "--image-keys", filepath.Join(dir, "k.pub")); err != nil {
		t.Fatalf("%v\n%s", err, n.log)
	}

	if n.boots(t) != "A" {
		t.Fatalf("boots %q", n.boots(t))
	}

	if _, err = imager.VerifyDir(slots.Dir(filepath.Join(n.state, "BOOT"), slots.A), []ed25519.PublicKey{pub}); err != nil {
		t.Fatalf("installed slot: %v", err)
	}
}

func TestWipeFolder(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "EPHEMERAL", "lib"), 0o700)
	os.WriteFile(filepath.Join(root, "EPHEMERAL", "lib", "data"), []byte("x"), 0o600)

	if err := WipeFolder(root, "EPHEMERAL"); err != nil {
		t.Fatal(err)
	}

	entries, err := os.ReadDir(filepath.Join(root, "EPHEMERAL"))
	if err != nil || len(entries) != 0 {
		t.Fatalf("EPHEMERAL after wipe: %v %v", entries, err)
	}

	all, _ := os.ReadDir(root)
	if len(all) != 1 {
		t.Fatalf("wipe left %d entries in the state folder", len(all))
	}
}
