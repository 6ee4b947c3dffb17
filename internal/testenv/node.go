package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	gensecrets "github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	configres "github.com/siderolabs/talos/pkg/machinery/resources/config"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/talos-go/talos/internal/unixsock"
)

// Config generates a machine config of the given type for a cluster whose endpoint is addr.
func Config(t testing.TB, typ machine.Type, endpointAddr string) []byte {
	t.Helper()

	in, err := generate.NewInput("test", fmt.Sprintf("https://%s:6443", endpointAddr), constants.DefaultKubernetesVersion)
	if err != nil {
		t.Fatal(err)
	}

	return encodeConfig(t, in, typ)
}

// Configs generates one cluster's secrets and the configs of its control plane and worker,
// for tests that need the secrets too (the OS CA, the join token).
func Configs(t testing.TB, endpointAddr string) (bundle *gensecrets.Bundle, controlPlane, worker []byte) {
	t.Helper()

	bundle, err := gensecrets.NewBundle(gensecrets.NewFixedClock(time.Now()), config.TalosVersionCurrent)
	if err != nil {
		t.Fatal(err)
	}

	in, err := generate.NewInput("test", fmt.Sprintf("https://%s:6443", endpointAddr), constants.DefaultKubernetesVersion, generate.WithSecretsBundle(bundle))
	if err != nil {
		t.Fatal(err)
	}

	return bundle, encodeConfig(t, in, machine.TypeControlPlane), encodeConfig(t, in, machine.TypeWorker)
}

func encodeConfig(t testing.TB, in *generate.Input, typ machine.Type) []byte {
	t.Helper()

	cfg, err := in.Config(typ)
	if err != nil {
		t.Fatal(err)
	}

	endpoint, err := localDiscovery()
	if err != nil {
		t.Fatalf("the tests' discovery service: %v", err)
	}

	if cfg, err = cfg.PatchV1Alpha1(func(c *v1alpha1.Config) error {
		if d := c.ClusterConfig.ClusterDiscoveryConfig; d != nil {
			d.DiscoveryRegistries.RegistryService.RegistryEndpoint = endpoint
		}

		return nil
	}); err != nil {
		t.Fatal(err)
	}

	out, err := cfg.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
	if err != nil {
		t.Fatal(err)
	}

	return out
}

// outputTail is how much of a node's output a failed test shows.
const outputTail = 32 << 10

// Node is a running machined process; when its test fails, the end of its output is logged.
type Node struct {
	Address string
	State   string
	Cmd     *exec.Cmd
	Output  *SyncBuffer
	Exited  chan error
}

// Socket is the node's machine API socket.
func (n *Node) Socket() string {
	return filepath.Join(n.State, "system", "run", "machined", "machined.sock")
}

// StartNode starts machined on addr with a new state folder and an optional config; it is
// stopped when the test ends.
func StartNode(t testing.TB, addr string, config []byte, extraArgs ...string) *Node {
	t.Helper()

	state := t.TempDir()
	args := []string{"--platform", "container", "--state", state, "--address", addr}

	if config != nil {
		path := filepath.Join(t.TempDir(), "config.yaml")
		if err := os.WriteFile(path, config, 0o600); err != nil {
			t.Fatal(err)
		}

		args = append(args, "--config", path)
	}

	return StartNodeArgs(t, state, append(args, extraArgs...)...)
}

// StartNodeArgs starts machined with exactly these arguments.
func StartNodeArgs(t testing.TB, state string, args ...string) *Node {
	t.Helper()

	n := &Node{State: state, Output: &SyncBuffer{}, Exited: make(chan error, 1)}

	for i, a := range args {
		if a == "--address" && i+1 < len(args) {
			n.Address = args[i+1]
		}
	}

	n.Cmd = exec.Command(MachinedBinary(t), args...)
	n.Cmd.Stdout, n.Cmd.Stderr = n.Output, n.Output
	// The node dies with the test process, however that ends (a timeout's panic, a kill): it
	// would hold its addresses and ports against the next run. (Pdeathsig follows the thread
	// that started the node; no test starts one from a thread it locks and lets end.)
	n.Cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}

	if err := n.Cmd.Start(); err != nil {
		t.Fatal(err)
	}

	go func() { n.Exited <- n.Cmd.Wait() }()

	t.Cleanup(func() {
		n.Stop(t)

		if t.Failed() {
			t.Logf("output of node %s (at most its last %d bytes):\n%s", n.Address, outputTail, tail(n.Output.String(), outputTail))
		}
	})

	return n
}

// SyncBuffer collects a process's output; tests may read it while the process writes.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()

	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()

	return s.b.String()
}

// Stop sends SIGTERM and waits for the node to exit.
func (n *Node) Stop(t testing.TB) {
	if n.Cmd.ProcessState != nil {
		return
	}

	n.Cmd.Process.Signal(syscall.SIGTERM)

	select {
	case <-n.Exited:
	case <-time.After(30 * time.Second):
		n.Cmd.Process.Kill()
		<-n.Exited
		t.Errorf("node %s did not stop within 30s", n.Address)
	}
}

// Client connects to the node's machine API socket, waiting for it to appear.
func (n *Node) Client(t testing.TB) *client.Client {
	t.Helper()

	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(n.Socket()); err == nil {
			break
		}

		select {
		case err := <-n.Exited:
			n.Exited <- err
			t.Fatalf("node exited before serving: %v", err)
		default:
		}

		if time.Now().After(deadline) {
			t.Fatalf("socket %s did not appear", n.Socket())
		}

		time.Sleep(20 * time.Millisecond)
	}

	c, err := client.New(context.Background(), client.WithUnixSocket(n.Socket()), client.WithGRPCDialOptions(grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithContextDialer(unixsock.GRPCDialer)))
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { c.Close() })

	return c
}

// WaitConfigured waits until the node has loaded its machine config (its MachineType exists):
// the socket serves before the boot reaches the config.
func (n *Node) WaitConfigured(t testing.TB, c *client.Client) {
	t.Helper()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	if err := AwaitConfig(ctx, c); err != nil {
		t.Fatal(err)
	}
}

// AwaitConfig polls until the node behind c has loaded its machine config, or ctx ends.
func AwaitConfig(ctx context.Context, c *client.Client) error {
	for {
		if _, err := safe.StateGetByID[*configres.MachineType](ctx, c.COSI, configres.MachineTypeID); err == nil {
			return nil
		}

		select {
		case <-ctx.Done():
			return errors.New("the node did not load its config")
		case <-time.After(20 * time.Millisecond):
		}
	}
}
