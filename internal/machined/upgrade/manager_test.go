package upgrade

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/cosi-project/runtime/pkg/state/impl/inmem"
	"github.com/cosi-project/runtime/pkg/state/impl/namespaced"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"go.uber.org/zap"

	"github.com/talos-go/talos/internal/bootloader"
	"github.com/talos-go/talos/internal/etcd"
	"github.com/talos-go/talos/internal/imager"
	"github.com/talos-go/talos/internal/machined/errkind"
	"github.com/talos-go/talos/internal/machined/events"
	"github.com/talos-go/talos/internal/machined/runtime"
	"github.com/talos-go/talos/internal/machined/system"
	"github.com/talos-go/talos/internal/machined/system/runner"
	"github.com/talos-go/talos/internal/meta"
	"github.com/talos-go/talos/internal/slots"
)

// recorder is a fake node and etcd guard that records the calls of a sequence.
type recorder struct {
	mu     sync.Mutex
	calls  []string
	cp     bool
	health error
	done   chan struct{} // closed on Reboot or Shutdown

	rejoining []string
}

func (r *recorder) add(c string) {
	r.mu.Lock()
	defer r.mu.Unlock()

	r.calls = append(r.calls, c)
}

func (r *recorder) list() string {
	r.mu.Lock()
	defer r.mu.Unlock()

	return strings.Join(r.calls, ",")
}

func (r *recorder) StopServices(context.Context) error { r.add("stop"); return nil }
func (r *recorder) Reboot() error                      { r.add("reboot"); close(r.done); return nil }
func (r *recorder) Shutdown() error                    { r.add("shutdown"); close(r.done); return nil }
func (r *recorder) IsControlPlane() bool               { return r.cp }

func (r *recorder) Lock(context.Context, string) (func(), error) {
	r.add("lock")

	return func() { r.add("unlock") }, nil
}

func (r *recorder) CheckHealthyWithout(context.Context) error {
	r.add("health")

	return r.health
}

func (r *recorder) Leave(context.Context) error { r.add("leave"); return nil }

func (r *recorder) MarkRejoining(context.Context, string) error { r.add("mark"); return nil }
func (r *recorder) Rejoined(context.Context, string) error      { r.add("rejoined"); return nil }
func (r *recorder) Rejoining(context.Context) ([]string, error) { return r.rejoining, nil }

// kindOf is err's kind, 0 for none.
func kindOf(err error) errkind.Kind {
	k, _ := errkind.Of(err)

	return k
}

type env struct {
	m     *Manager
	rec   *recorder
	root  string
	image string
}

func newEnv(t *testing.T, cp bool) *env {
	t.Helper()

	root := t.TempDir()
	dir := t.TempDir()

	if _, err := imager.GenerateKey(filepath.Join(dir, "k.key"), filepath.Join(dir, "k.pub")); err != nil {
		t.Fatal(err)
	}

	priv, _ := imager.LoadPrivateKey(filepath.Join(dir, "k.key"))
	pub, _ := os.ReadFile(filepath.Join(dir, "k.pub"))

	for path, content := range map[string]string{
		filepath.Join(root, bootloader.TrustedKeysPath):   string(pub),
		filepath.Join(root, "BOOT", "A", "machined"):      "old",
		filepath.Join(root, "EPHEMERAL", "lib", "marker"): "data",
		filepath.Join(dir, "machined"):                    "new",
		filepath.Join(dir, "etcd"):                        "etcd",
	} {
		os.MkdirAll(filepath.Dir(path), 0o700)

		if err := os.WriteFile(path, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}

	img := filepath.Join(dir, "img")
	if _, err := imager.BuildFile(img, imager.BuildOptions{Version: "v2.0.0", Key: priv,
		Files: map[string]string{"machined": filepath.Join(dir, "machined"), "etcd": filepath.Join(dir, "etcd")}}); err != nil {
		t.Fatal(err)
	}

	rec := &recorder{cp: cp, done: make(chan struct{})}
	st := state.WrapCore(namespaced.NewState(inmem.Build))
	m := New(&runtime.Runtime{Mode: runtime.Mode{Kind: runtime.Process}, Paths: runtime.Paths{Root: root}, Events: events.NewBus(), State: st}, rec)
	m.Slot = slots.A
	m.Etcd = rec

	t.Cleanup(m.Close)

	return &env{m: m, rec: rec, root: root, image: img}
}

func (e *env) meta(t *testing.T) meta.Values {
	t.Helper()

	s, _ := meta.Open(filepath.Join(e.root, "META"))

	v, err := s.Read()
	if err != nil {
		t.Fatal(err)
	}

	return v
}

func TestUpgradeSequence(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cp        bool
		preserve  bool
		wantCalls string
		wiped     bool
	}{
		{"worker", false, false, "stop,reboot", true},
		{"worker preserve", false, true, "stop,reboot", false},
		{"control plane", true, false, "lock,health,mark,leave,stop,reboot", true},
		{"control plane preserve", true, true, "lock,health,stop,reboot", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.cp)

			ack, err := e.m.Upgrade(context.Background(), &machine.UpgradeRequest{Image: e.image, Preserve: tc.preserve}, "actor")
			if err != nil {
				t.Fatal(err)
			}

			if !strings.Contains(ack, "v2.0.0") {
				t.Fatalf("ack %q", ack)
			}

			<-e.rec.done

			if got := e.rec.list(); got != tc.wantCalls {
				t.Fatalf("calls %q, want %q", got, tc.wantCalls)
			}

			if v := e.meta(t); v[meta.BootOnce] != slots.B || v[meta.UpgradeTo] != "v2.0.0" {
				t.Fatalf("META %v", v)
			}

			if data, _ := os.ReadFile(filepath.Join(e.root, "BOOT", "B", "machined")); string(data) != "new" {
				t.Fatalf("slot B holds %q", data)
			}

			if data, _ := os.ReadFile(filepath.Join(e.root, "BOOT", "A", "machined")); string(data) != "old" {
				t.Fatal("the running slot was touched")
			}

			_, err = os.Stat(filepath.Join(e.root, "EPHEMERAL", "lib", "marker"))
			if wiped := os.IsNotExist(err); wiped != tc.wiped {
				t.Fatalf("EPHEMERAL wiped %v, want %v", wiped, tc.wiped)
			}

			if matches, _ := filepath.Glob(filepath.Join(e.root, "BOOT", ".*-*")); len(matches) != 0 {
				t.Fatalf("leftovers in BOOT: %v", matches)
			}

			// Progress was published as events of the caller's actor.
			var phases []string

			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()

			errDone := errors.New("done")
			err = e.m.R.Events.Watch(ctx, events.TailOptions{Events: -1}, func(ev events.Event) error {
				if ev.ActorID != "actor" {
					return nil
				}

				switch p := ev.Payload.(type) {
				case *machine.PhaseEvent:
					phases = append(phases, p.Phase)
				case *machine.SequenceEvent:
					if p.Sequence == "upgrade" && p.Action == machine.SequenceEvent_STOP {
						if p.Error != nil {
							return fmt.Errorf("upgrade reported an error: %s", p.Error.Message)
						}

						return errDone
					}
				}

				return nil
			})
			if !errors.Is(err, errDone) {
				t.Fatalf("upgrade events: %v (phases %v)", err, phases)
			}

			if !slices.Contains(phases, "image written to the inactive slot and verified") {
				t.Fatalf("phases %v", phases)
			}
		})
	}
}

func TestUpgradeEtcdRefusal(t *testing.T) {
	e := newEnv(t, true)
	e.rec.health = ErrLastMember

	// Without --preserve the only member must not upgrade: the lock is released, nothing changes.
	if _, err := e.m.Upgrade(context.Background(), &machine.UpgradeRequest{Image: e.image}, "actor"); err != nil {
		t.Fatal(err)
	}

	e.m.Close() // waits for the background sequence

	if got := e.rec.list(); got != "lock,health,unlock" {
		t.Fatalf("calls %q", got)
	}

	if bootloader.SlotInstalled(filepath.Join(e.root, "BOOT"), slots.B) {
		t.Fatal("slot B written although etcd refused")
	}

	if v := e.meta(t); v[meta.BootOnce] != "" {
		t.Fatalf("boot-once set: %v", v)
	}
}

func TestUpgradeRefusals(t *testing.T) {
	e := newEnv(t, true)

	for _, tc := range []struct {
		name string
		req  *machine.UpgradeRequest
		kind errkind.Kind
		want string
	}{
		{"relative", &machine.UpgradeRequest{Image: "img"}, errkind.Invalid, "absolute path"},
		{"reference without a registry host", &machine.UpgradeRequest{Image: "siderolabs/installer:v1.11.1"}, errkind.Invalid, "installer image reference REGISTRY/REPOSITORY:TAG"},
		{"stage without preserve on a control plane", &machine.UpgradeRequest{Image: e.image, Stage: true}, errkind.Invalid, "needs --preserve"},
		{"powercycle", &machine.UpgradeRequest{Image: e.image, RebootMode: machine.UpgradeRequest_POWERCYCLE}, errkind.Invalid, "powercycle"},
	} {
		_, err := e.m.Upgrade(context.Background(), tc.req, "a")
		if kindOf(err) != tc.kind || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s: %v", tc.name, err)
		}
	}

	e.m.Slot = ""
	if _, err := e.m.Upgrade(context.Background(), &machine.UpgradeRequest{Image: e.image}, "a"); kindOf(err) != errkind.Precondition || !strings.Contains(err.Error(), "machined boot") {
		t.Fatalf("without boot stage: %v", err)
	}

	if e.rec.list() != "" {
		t.Fatalf("refused requests did something: %s", e.rec.list())
	}
}

func TestRollbackAndReset(t *testing.T) {
	e := newEnv(t, false)

	if err := e.m.Rollback(context.Background()); kindOf(err) != errkind.Precondition || !strings.Contains(err.Error(), "no previous version") {
		t.Fatalf("rollback without slot B: %v", err)
	}

	if err := e.m.Reset(context.Background(), &machine.ResetRequest{UserDisksToWipe: []string{"/dev/sdb"}}, "a"); kindOf(err) != errkind.Invalid {
		t.Fatalf("reset of user disks: %v", err)
	}

	os.MkdirAll(filepath.Join(e.root, "STATE"), 0o700)

	if err := os.WriteFile(filepath.Join(e.root, "STATE", "config.yaml"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}

	if err := e.m.Reset(context.Background(), &machine.ResetRequest{Reboot: true, SystemPartitionsToWipe: []*machine.ResetPartitionSpec{{Label: "EPHEMERAL", Wipe: true}}}, "a"); err != nil {
		t.Fatal(err)
	}

	// The stage says so as soon as the reset is accepted: `get machinestatus` shows resetting.
	ms, err := safe.StateGetByID[*runtimeres.MachineStatus](context.Background(), e.m.R.State, runtimeres.MachineStatusID)
	if err != nil || ms.TypedSpec().Stage != runtimeres.MachineStageResetting || ms.TypedSpec().Status.Ready {
		t.Fatalf("machine status during the reset: %v %v", ms, err)
	}

	<-e.rec.done

	if got := e.rec.list(); got != "stop,reboot" {
		t.Fatalf("calls %q", got)
	}

	if _, err := os.Stat(filepath.Join(e.root, "EPHEMERAL", "lib", "marker")); !os.IsNotExist(err) {
		t.Fatal("EPHEMERAL not wiped")
	}

	if _, err := os.Stat(filepath.Join(e.root, "STATE", "config.yaml")); err != nil {
		t.Fatal("STATE wiped although only EPHEMERAL was asked")
	}
}

func TestGracefulResetOfControlPlane(t *testing.T) {
	for _, tc := range []struct {
		name   string
		health error
		calls  string // calls on the node and guard; "" for a refusal
		want   string // part of the refusal
	}{
		{"quorum kept", nil, "health,leave,stop,shutdown", ""},
		{"quorum at risk", errors.New("etcd members [cp2] are not healthy"), "health", "--graceful=false"},
		{"last member", ErrLastMember, "health", "only etcd voting member"},
		{"etcd not running here", fmt.Errorf("etcd on this node is not healthy: %w", etcd.ErrNotRunning), "health,stop,shutdown", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, true)
			e.rec.health = tc.health

			err := e.m.Reset(context.Background(), &machine.ResetRequest{Graceful: true}, "a")
			if tc.want != "" {
				if kindOf(err) != errkind.Precondition || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("want FailedPrecondition naming %q, got %v", tc.want, err)
				}

				e.m.Close()

				if _, err := os.Stat(filepath.Join(e.root, "EPHEMERAL", "lib", "marker")); err != nil {
					t.Fatal("a refused reset wiped EPHEMERAL")
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}

				<-e.rec.done
				e.m.Close()
			}

			if got := e.rec.list(); got != tc.calls {
				t.Fatalf("calls %q, want %q", got, tc.calls)
			}

			// A refused reset frees the manager for the next request.
			if tc.want != "" {
				e.rec.health = nil
				if err := e.m.Reset(context.Background(), &machine.ResetRequest{Graceful: true}, "a"); err != nil {
					t.Fatalf("reset after a refusal: %v", err)
				}

				<-e.rec.done
			}
		})
	}
}

// TestUpgradeWaitsForRejoin: a control plane does not upgrade while another one that left etcd
// for its own upgrade has not rejoined; its own record does not hold it back.
func TestUpgradeWaitsForRejoin(t *testing.T) {
	e := newEnv(t, true)
	e.m.StepTimeout = 2 * time.Second
	e.rec.rejoining = []string{"127.5.0.9"}

	if _, err := e.m.Upgrade(context.Background(), &machine.UpgradeRequest{Image: e.image}, "actor"); err != nil {
		t.Fatal(err)
	}

	e.m.Close()

	if got := e.rec.list(); got != "lock,unlock" {
		t.Fatalf("calls %q: the upgrade must wait for the rejoin, then give up", got)
	}

	if bootloader.SlotInstalled(filepath.Join(e.root, "BOOT"), slots.B) {
		t.Fatal("slot B written while another control plane was rejoining")
	}

	own := newEnv(t, true)
	own.m.R.Address = "127.5.0.2"
	own.rec.rejoining = []string{"127.5.0.2"}

	if _, err := own.m.Upgrade(context.Background(), &machine.UpgradeRequest{Image: own.image}, "actor"); err != nil {
		t.Fatal(err)
	}

	<-own.rec.done

	if got := own.rec.list(); got != "lock,health,mark,leave,stop,reboot" {
		t.Fatalf("calls %q", got)
	}
}

// TestTrialCondition: a slot on trial leaves MachineStatus's "upgrade" condition unmet (the node
// not ready) until the services it needs are up; then the slot is permanent and the node ready.
func TestTrialCondition(t *testing.T) {
	e := newEnv(t, true)
	e.m.Slot = slots.B

	store, _ := meta.Open(filepath.Join(e.root, "META"))
	if err := store.Set(meta.ActiveSlot, slots.A, meta.TrialSlot, slots.B); err != nil {
		t.Fatal(err)
	}

	etcdUp := make(chan struct{})
	sup := system.NewSupervisor(zap.NewNop(), nil)
	sup.Load(&system.Service{
		ID:        "etcd",
		Condition: func(ctx context.Context) error { <-etcdUp; return nil },
		Runner: func() (system.Runner, error) {
			return &runner.Goroutine{Name: "etcd", Main: func(ctx context.Context, _ io.Writer) error { <-ctx.Done(); return nil }}, nil
		},
	})

	if err := sup.Start("etcd"); err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { _ = sup.StopAll(context.Background()) })

	e.m.R.Supervisor = sup
	ctx := context.Background()

	if err := safe.StateModify(ctx, e.m.R.State, runtimeres.NewMachineStatus(), func(r *runtimeres.MachineStatus) error {
		r.TypedSpec().Stage = runtimeres.MachineStageRunning
		r.TypedSpec().Status.Ready = true

		return nil
	}); err != nil {
		t.Fatal(err)
	}

	status := func() *runtimeres.MachineStatusSpec {
		ms, err := safe.StateGetByID[*runtimeres.MachineStatus](ctx, e.m.R.State, runtimeres.MachineStatusID)
		if err != nil {
			t.Fatal(err)
		}

		return ms.TypedSpec()
	}

	e.m.BootSucceeded()

	st := status()
	if st.Status.Ready || len(st.Status.UnmetConditions) != 1 || st.Status.UnmetConditions[0].Name != "upgrade" ||
		!strings.Contains(st.Status.UnmetConditions[0].Reason, "slot B is on trial") {
		t.Fatalf("slot on trial: status %+v", st.Status)
	}

	time.Sleep(100 * time.Millisecond)

	if v := e.meta(t); v[meta.TrialSlot] != slots.B {
		t.Fatalf("slot made permanent before etcd is up: %v", v)
	}

	close(etcdUp)

	deadline := time.Now().Add(10 * time.Second)
	for st = status(); !st.Status.Ready && time.Now().Before(deadline); st = status() {
		time.Sleep(10 * time.Millisecond)
	}

	if !st.Status.Ready || len(st.Status.UnmetConditions) != 0 {
		t.Fatalf("after etcd is up: status %+v", st.Status)
	}

	if v := e.meta(t); v[meta.TrialSlot] != "" || v[meta.ActiveSlot] != slots.B {
		t.Fatalf("slot B not permanent: %v", v)
	}
}
