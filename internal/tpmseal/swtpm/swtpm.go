// Package swtpm runs swtpm, a software TPM 2.0, for tests: a real TPM implementation, not a
// mock, reached over a unix socket.
package swtpm

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-tpm/tpm2/transport"
	"github.com/google/go-tpm/tpm2/transport/linuxudstpm"
)

// TPM is a running swtpm.
type TPM struct {
	transport.TPMCloser
	cmd  *exec.Cmd
	sock string
}

// Open opens another connection to the TPM, as a process opening /dev/tpmrm0 does.
func (tpm *TPM) Open() (transport.TPMCloser, error) { return linuxudstpm.Open(tpm.sock) }

// Start runs swtpm with its state in dir (kept across Stop and Start, as a machine's TPM across
// reboots); the test is skipped when swtpm is not installed.
func Start(t *testing.T, dir string) *TPM {
	t.Helper()

	if _, err := exec.LookPath("swtpm"); err != nil {
		t.Skip("no swtpm: apt-get install swtpm")
	}

	sock := filepath.Join(dir, "tpm.sock")
	os.Remove(sock)

	cmd := exec.Command("swtpm", "socket", "--tpm2", "--tpmstate", "dir="+dir,
		"--server", "type=unixio,path="+sock, "--ctrl", "type=unixio,path="+filepath.Join(dir, "ctrl.sock"),
		"--flags", "not-need-init,startup-clear")

	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}

	tpm := &TPM{cmd: cmd, sock: sock}
	t.Cleanup(func() { tpm.Stop(t) })

	// The socket's file appears when swtpm binds it, before it listens: wait for a connection.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if conn, err := net.Dial("unix", sock); err == nil {
			conn.Close()

			break
		}

		if time.Now().After(deadline) {
			t.Fatal("swtpm did not listen on its socket")
		}
	}

	c, err := linuxudstpm.Open(sock)
	if err != nil {
		t.Fatal(err)
	}

	tpm.TPMCloser = c

	return tpm
}

// Stop stops swtpm (it saves its state).
func (tpm *TPM) Stop(t *testing.T) {
	if tpm.cmd.Process == nil || tpm.cmd.ProcessState != nil {
		return
	}

	if tpm.TPMCloser != nil {
		tpm.Close()
	}

	_ = tpm.cmd.Process.Signal(os.Interrupt)

	done := make(chan struct{})
	go func() { _ = tpm.cmd.Wait(); close(done) }()

	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = tpm.cmd.Process.Kill()
		<-done
	}
}
