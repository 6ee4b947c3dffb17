package vm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// TPM versions a node can have (--with-tpm2, --with-tpm1_2).
const (
	TPM2  = "2.0"
	TPM12 = "1.2"
)

// tpmSocket is where the node's swtpm listens for QEMU: in the temporary folder, named after the
// TPM's state, as a unix socket's path is short (108 bytes) and a cluster folder's may not be.
func (s NodeSpec) tpmSocket() string {
	sum := sha256.Sum256([]byte(s.TPMState))

	return filepath.Join(os.TempDir(), "swtpm-"+hex.EncodeToString(sum[:8])+".sock")
}

// startTPM runs swtpm for one QEMU run: it keeps the TPM's state in TPMState (so the TPM is the
// same across reboots, as a machine's) and ends when QEMU lets go of it.
func startTPM(ctx context.Context, s NodeSpec) (func(), error) {
	if err := os.MkdirAll(s.TPMState, 0o700); err != nil {
		return nil, fmt.Errorf("the TPM's state: %w", err)
	}

	sock := s.tpmSocket()
	os.Remove(sock) // a previous run's

	args := []string{"socket", "--tpmstate", "dir=" + s.TPMState, "--ctrl", "type=unixio,path=" + sock, "--terminate",
		"--log", "file=" + filepath.Join(s.TPMState, "swtpm.log")}
	if s.TPM == TPM2 {
		args = append(args, "--tpm2")
	}

	cmd := exec.Command("swtpm", args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}

	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting swtpm: %w (install it with `apt-get install swtpm`)", err)
	}

	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	stop := func() {
		cmd.Process.Signal(syscall.SIGTERM) // it may have ended with QEMU

		select {
		case _ = <-done: // asked to stop: its status is not news
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			_ = <-done
		}

		os.Remove(sock)
	}

	// QEMU connects at once: wait for the socket.
	for deadline := time.Now().Add(10 * time.Second); ; {
		if _, err := os.Stat(sock); err == nil {
			return stop, nil
		}

		select {
		case err := <-done:
			return nil, fmt.Errorf("swtpm ended before it listened: %v (its log: %s)", exitText(err), filepath.Join(s.TPMState, "swtpm.log"))
		case <-ctx.Done():
			stop()

			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}

		if time.Now().After(deadline) {
			stop()

			return nil, errors.New("swtpm did not listen within 10 s")
		}
	}
}
