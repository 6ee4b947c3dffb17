package etcd

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/talos-go/talos/internal/machined/system"
	"github.com/talos-go/talos/internal/machined/system/runner"
	"github.com/talos-go/talos/internal/testenv"
)

// failingRunner fails as etcd's first start does when its image cannot be had.
type failingRunner struct{}

func (failingRunner) Run(context.Context) error {
	return errors.New("importing the image: already exists")
}
func (failingRunner) String() string { return "failing" }

// A bootstrap that a start took and that failed before etcd had data is made again by the next
// start (the supervisor restarts the service): the accepted bootstrap is not lost, and a second
// one is still refused meanwhile.
func TestBootstrapSurvivesAFailedStart(t *testing.T) {
	caCert, caKey, err := testCA()
	if err != nil {
		t.Fatal(err)
	}

	c := newTestCluster(t, 1, caCert, caKey)
	n := c.nodes[0]

	starts := 0
	n.opts.Runner = func(args []string) system.Runner {
		starts++
		if starts == 1 {
			return failingRunner{}
		}

		return &runner.Process{Args: args, Output: n.opts.Output, GracefulTimeout: 15 * time.Second}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	if err = n.m.Bootstrap(ctx, BootstrapOptions{}); err != nil {
		t.Fatal(err)
	}

	if err = n.m.Run(ctx); err == nil || starts != 1 {
		t.Fatalf("the first start: %v (starts %d), want its failure", err, starts)
	}

	if err = n.m.Bootstrap(ctx, BootstrapOptions{}); !errors.Is(err, ErrAlreadyBootstrapped) {
		t.Errorf("a second bootstrap after the failed start: %v, want it refused", err)
	}

	n.start()

	testenv.WaitFor(t, "etcd bootstrapped by the restart", time.Minute, func() error {
		return c.votersHealthy(n, 1)
	})
}
