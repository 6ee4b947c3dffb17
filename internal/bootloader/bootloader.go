package bootloader

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/talos-go/talos/internal/atomicfile"
	"github.com/talos-go/talos/internal/imager"
	"github.com/talos-go/talos/internal/meta"
	"github.com/talos-go/talos/internal/slots"
)

// DefaultBootTimeout is how long a trial slot has to report a successful boot.
const DefaultBootTimeout = 5 * time.Minute

// A machined that dies (a signal, a panic, any exit but shutdown or reboot) is what a PID 1 crash
// is on a real machine: the kernel panics and the machine reboots. The boot stage boots again,
// after a pause that doubles with each crash in a row, and gives up when crashes loop: more than
// CrashLimit crashes in a row, each within CrashUptime of machined's start. A machined that ran
// longer, or asked for a reboot, starts a new count: faults spread over a node's life are not
// a loop.
const (
	CrashLimit  = 5
	CrashUptime = 30 * time.Second
	crashPause  = time.Second
)

// Options are the boot stage's own settings; every other argument goes to machined.
type Options struct {
	StateDir     string
	BootTimeout  time.Duration
	Image        string // install slot A from this signed image on first boot
	ImageKeys    string // PEM public keys to trust for images; copied to BOOT/image-signing.pub
	MachinedArgs []string
	Log          io.Writer
	CrashPause   time.Duration // pause before the first reboot after a crash; doubles per crash in a row
}

// TrustedKeysPath is where a node keeps the public keys it trusts for images (PEM), relative to
// the state folder. It is in BOOT, with the installed system, so a reset (which wipes STATE and
// EPHEMERAL) keeps it. `machined boot --image-keys FILE` puts it there.
const TrustedKeysPath = "BOOT/image-signing.pub"

// parseArgs takes the boot stage's flags out of args; --state is also passed on to machined.
func parseArgs(args []string) (Options, error) {
	o := Options{BootTimeout: DefaultBootTimeout, Log: os.Stderr}

	for i := 0; i < len(args); i++ {
		a := args[i]
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")

		if !strings.HasPrefix(a, "-") || (name != "state" && name != "boot-timeout" && name != "image" && name != "image-keys") {
			o.MachinedArgs = append(o.MachinedArgs, a)

			continue
		}

		if !hasValue {
			if i+1 >= len(args) {
				return o, fmt.Errorf("--%s needs a value", name)
			}

			i++
			value = args[i] //nolint:gosec // i+1 < len(args) is checked above
		}

		switch name {
		case "state":
			o.StateDir = value
			o.MachinedArgs = append(o.MachinedArgs, "--state", value)
		case "boot-timeout":
			d, err := time.ParseDuration(value)
			if err != nil || d <= 0 {
				return o, fmt.Errorf("--boot-timeout %q is not a duration like 5m", value)
			}

			o.BootTimeout = d
		case "image":
			o.Image = value
		case "image-keys":
			o.ImageKeys = value
		}
	}

	if o.StateDir == "" {
		return o, errors.New("--state is required: the node's state folder (its disk)")
	}

	abs, err := filepath.Abs(o.StateDir)
	if err != nil {
		return o, err
	}

	o.StateDir = abs

	return o, nil
}

// Main is `machined boot`.
func Main(args []string) error {
	o, err := parseArgs(args)
	if err != nil {
		return fmt.Errorf("%w\nusage: machined boot --state DIR [--boot-timeout 5m] [--image FILE] [--image-keys FILE] <machined flags>", err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	return Run(ctx, o)
}

type stage struct {
	o       Options
	boot    string
	meta    *meta.Store
	crashes int // machined crashes in a row, each soon after its start
}

func (s *stage) logf(format string, args ...any) {
	fmt.Fprintf(s.o.Log, "boot: "+format+"\n", args...)
}

// Run boots the node until it shuts down or ctx ends (the node is then stopped cleanly).
func Run(ctx context.Context, o Options) error {
	if o.Log == nil {
		o.Log = os.Stderr
	}

	if o.BootTimeout <= 0 {
		o.BootTimeout = DefaultBootTimeout
	}

	if o.CrashPause <= 0 {
		o.CrashPause = crashPause
	}

	s := &stage{o: o, boot: filepath.Join(o.StateDir, "BOOT")}

	if err := os.MkdirAll(s.boot, 0o700); err != nil {
		return fmt.Errorf("creating BOOT: %w", err)
	}

	lock, err := os.OpenFile(filepath.Join(s.boot, ".bootloader.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("opening boot lock: %w", err)
	}
	defer lock.Close()

	if err = unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return fmt.Errorf("another boot stage runs with state folder %s: stop it first", o.StateDir)
	}

	if s.meta, err = meta.Open(filepath.Join(o.StateDir, "META")); err != nil {
		return err
	}

	removeTrash(o.StateDir)

	if o.ImageKeys != "" {
		if err = installKeys(o.ImageKeys, filepath.Join(o.StateDir, TrustedKeysPath)); err != nil {
			return err
		}
	}

	if err = s.install(); err != nil {
		return err
	}

	// The child is killed if this process dies; Pdeathsig follows the thread that started it.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	for {
		d, err := s.chooseSlot()
		if err != nil {
			return fmt.Errorf("boot: %w", err)
		}

		s.logf("booting slot %s: %s", d.Slot, d.Reason)

		again, err := s.runSlot(ctx, d)
		if err != nil || !again {
			return err
		}
	}
}

// chooseSlot picks the slot to boot (slots.Choose) and records it in META, wiping first what a
// staged upgrade or an interrupted reset left to wipe.
func (s *stage) chooseSlot() (slots.Decision, error) {
	var d slots.Decision

	err := s.meta.Update(func(v meta.Values) error {
		var err error

		d, err = slots.Choose(v, func(slot string) bool { return SlotInstalled(s.boot, slot) })
		if err != nil {
			return err
		}

		if d.Trial && v[meta.WipeEphemeral] != "" {
			v[meta.WipeEphemeral] = ""

			if err = WipeFolder(s.o.StateDir, "EPHEMERAL"); err != nil {
				return fmt.Errorf("wiping EPHEMERAL for the staged upgrade: %w", err)
			}

			s.logf("EPHEMERAL wiped for the staged upgrade")
		}

		// A reset that machined began and did not finish (it died after leaving etcd).
		if labels := v[meta.ResetWipe]; labels != "" {
			for _, label := range strings.Split(labels, ",") {
				if label != "STATE" && label != "EPHEMERAL" {
					continue // META is ours, but a wipe goes only where a reset may
				}

				if err = WipeFolder(s.o.StateDir, label); err != nil {
					return fmt.Errorf("finishing the interrupted reset: wiping %s: %w", label, err)
				}
			}

			v[meta.ResetWipe] = ""
			s.logf("finished an interrupted reset: wiped %s", labels)
		}

		v[meta.LastBoot] = d.Slot
		if d.Trial {
			v[meta.LastBoot] += " (trial)"
		}

		return nil
	})

	return d, err
}

// install puts a first slot in place when BOOT is empty.
func (s *stage) install() error {
	if SlotInstalled(s.boot, slots.A) || SlotInstalled(s.boot, slots.B) {
		return nil
	}

	dest := slots.Dir(s.boot, slots.A)
	os.RemoveAll(dest)

	if s.o.Image != "" {
		keys, err := imager.NodeKeys(filepath.Join(s.o.StateDir, TrustedKeysPath))
		if err != nil {
			return err
		}

		m, err := imager.Extract(s.o.Image, keys, dest)
		if err != nil {
			return fmt.Errorf("installing from --image %s, nothing was changed: %w", s.o.Image, err)
		}

		s.logf("installed image %s into slot A", m.Version)

		return s.meta.Set(meta.ActiveSlot, slots.A)
	}

	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("installing: finding own binary: %w", err)
	}

	files := map[string]string{imager.MachinedName: self}
	if etcd := filepath.Join(filepath.Dir(self), imager.EtcdName); fileExists(etcd) {
		files[imager.EtcdName] = etcd
	}

	if err = installFiles(dest, files); err != nil {
		return fmt.Errorf("installing slot A: %w", err)
	}

	s.logf("installed %s into slot A", self)

	return s.meta.Set(meta.ActiveSlot, slots.A)
}

// installKeys copies trusted public keys into BOOT after checking they are public keys.
func installKeys(src, dst string) error {
	keys, err := imager.LoadPublicKeys(src)
	if err != nil {
		return fmt.Errorf("--image-keys: %w", err)
	}

	if len(keys) == 0 {
		return fmt.Errorf("--image-keys %s holds no public key: give the .pub file written by `imager keygen`", src)
	}

	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}

	return atomicfile.WriteFile(dst, data, 0o644)
}

func fileExists(p string) bool {
	fi, err := os.Stat(p)

	return err == nil && fi.Mode().IsRegular()
}

// installFiles copies files into a new folder dest, atomically (temporary folder, rename).
func installFiles(dest string, files map[string]string) error {
	tmp, err := os.MkdirTemp(filepath.Dir(dest), "."+filepath.Base(dest)+".tmp-")
	if err != nil {
		return err
	}

	defer os.RemoveAll(tmp)

	for name, src := range files {
		if err = copyFile(src, filepath.Join(tmp, name)); err != nil {
			return err
		}
	}

	if err = os.Rename(tmp, dest); err != nil {
		return err
	}

	return atomicfile.SyncDir(filepath.Dir(dest))
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()

	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}

	if _, err = io.Copy(out, in); err != nil {
		out.Close()

		return err
	}

	if err = out.Sync(); err != nil {
		out.Close()

		return err
	}

	return out.Close()
}

// runSlot runs machined from a slot until it exits. It reports whether to boot again.
func (s *stage) runSlot(ctx context.Context, d slots.Decision) (bool, error) {
	cmd := exec.Command(SlotBinary(s.boot, d.Slot), s.o.MachinedArgs...)
	cmd.Args[0] = "machined"
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), EnvBootStage+"=1", slots.EnvSlot+"="+d.Slot)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}

	if err := cmd.Start(); err != nil {
		if d.Trial {
			s.logf("slot %s does not start: %v", d.Slot, err)

			return true, nil // the next boot falls back
		}

		return false, fmt.Errorf("starting machined from slot %s: %w", d.Slot, err)
	}

	started := time.Now()
	exited := make(chan error, 1)

	go func() { exited <- cmd.Wait() }()

	var watchdog <-chan time.Time

	if d.Trial {
		t := time.NewTimer(s.o.BootTimeout)
		defer t.Stop()

		watchdog = t.C
	}

	for {
		select {
		case <-ctx.Done():
			cmd.Process.Signal(syscall.SIGTERM)

			err := <-exited
			s.logf("node stopped")

			if err != nil && !isSignalExit(err) {
				return false, fmt.Errorf("machined: %w", err)
			}

			return false, nil
		case <-watchdog:
			watchdog = nil

			trial, err := s.meta.Get(meta.TrialSlot)
			if err == nil && trial == d.Slot {
				s.logf("slot %s did not report a successful boot within %v: stopping it", d.Slot, s.o.BootTimeout)
				stopWithin(cmd, exited, 30*time.Second)

				return true, nil
			}
		case err := <-exited:
			code := exitCode(err)

			switch {
			case code == ExitReboot:
				s.logf("reboot")

				s.crashes = 0

				return true, nil
			case d.Trial:
				if trial, _ := s.meta.Get(meta.TrialSlot); trial == d.Slot {
					s.logf("slot %s exited (%v) before reporting a successful boot", d.Slot, err)

					return true, nil
				}

				if code == 0 {
					return false, nil
				}

				return s.crashed(ctx, d.Slot, err, time.Since(started))
			case code == 0:
				s.logf("shutdown")

				return false, nil
			default:
				return s.crashed(ctx, d.Slot, err, time.Since(started))
			}
		}
	}
}

// crashed handles machined dying on a slot that booted successfully: a reboot, as a kernel panic
// on PID 1's death is on a real machine, unless crashes loop. A trial slot never gets here
// before its boot is confirmed: that is the fallback's case.
func (s *stage) crashed(ctx context.Context, slot string, err error, uptime time.Duration) (bool, error) {
	if uptime >= CrashUptime {
		s.crashes = 0
	}

	s.crashes++

	if s.crashes > CrashLimit {
		return false, fmt.Errorf("machined from slot %s: %w (crash %d in a row, each within %v of its start: crash loop, giving up)",
			slot, err, s.crashes, CrashUptime)
	}

	pause := s.o.CrashPause << (s.crashes - 1)
	s.logf("machined from slot %s crashed (%v) after %v: rebooting in %v (crash %d in a row of at most %d)",
		slot, err, uptime.Round(time.Millisecond), pause, s.crashes, CrashLimit)

	select {
	case <-ctx.Done():
		s.logf("node stopped")

		return false, nil
	case <-time.After(pause):
		return true, nil
	}
}

// stopWithin sends SIGTERM, then SIGKILL if the process is still there after grace.
func stopWithin(cmd *exec.Cmd, exited <-chan error, grace time.Duration) {
	cmd.Process.Signal(syscall.SIGTERM)

	t := time.NewTimer(grace)
	defer t.Stop()

	// The exit status of a process we are stopping is not news: only its end matters.
	select {
	case _ = <-exited:
	case <-t.C:
		cmd.Process.Kill()
		_ = <-exited
	}
}

func exitCode(err error) int {
	if err == nil {
		return 0
	}

	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}

	return -1
}

func isSignalExit(err error) bool {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return true
		}
	}

	return false
}

// WipeFolder empties <root>/<name> without a window where it is half-wiped: the folder is
// renamed to a trash name, a new empty one takes its place, then the trash is removed (a
// crash leaves trash that the next boot removes).
func WipeFolder(root, name string) error {
	dir := filepath.Join(root, name)

	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return os.MkdirAll(dir, 0o700)
	}

	trash, err := os.MkdirTemp(root, ".trash-"+name+"-")
	if err != nil {
		return err
	}

	if err = os.Rename(dir, filepath.Join(trash, name)); err != nil {
		os.Remove(trash)

		return fmt.Errorf("wiping %s: %w", name, err)
	}

	if err = os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("wiping %s: %w", name, err)
	}

	if err = atomicfile.SyncDir(root); err != nil {
		return err
	}

	return os.RemoveAll(trash)
}

// removeTrash removes what an interrupted wipe or upgrade left: trash folders in the state
// folder, and staged, replaced or half-written slots in BOOT (META never points at those).
func removeTrash(root string) {
	for _, pattern := range []string{".trash-*", "BOOT/.staging-*", "BOOT/.old-*", "BOOT/.*.tmp-*"} {
		matches, _ := filepath.Glob(filepath.Join(root, pattern))
		for _, m := range matches {
			os.RemoveAll(m)
		}
	}
}
