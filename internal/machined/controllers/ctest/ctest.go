// Package ctest runs controllers under test: machined's own in-memory resource state (every
// namespace and definition registered), a cosi runtime holding only the controllers under test,
// and typed helpers over cosi's rtestutils assertions. A controller test then reads as "create
// an input, assert the output"; it is imported by tests only.
package ctest

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/controller"
	cosiruntime "github.com/cosi-project/runtime/pkg/controller/runtime"
	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/resource/rtestutils"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"

	"github.com/talos-go/talos/internal/machined/resources"
)

// Timeout bounds every wait of one test: an assertion that never holds fails at it.
const Timeout = time.Minute

// Env is one running controller runtime and its state, for one test.
type Env struct {
	T     *testing.T
	Ctx   context.Context // the test's context, ended by its cleanup
	State state.State

	stop func()
}

// Start runs ctrls on a fresh state until the test ends; the runtime must then stop cleanly.
func Start(t *testing.T, ctrls ...controller.Controller) *Env {
	t.Helper()

	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	t.Cleanup(cancel)

	st, err := resources.NewState(ctx)
	require.NoError(t, err)

	log := zaptest.NewLogger(t, zaptest.WrapOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return zapcore.NewTee(c, &panicCore{t: t})
	})))

	rt, err := cosiruntime.NewRuntime(st, log)
	require.NoError(t, err)

	for _, ctrl := range ctrls {
		require.NoError(t, rt.RegisterController(ctrl), "registering %s", ctrl.Name())
	}

	done := make(chan error, 1)

	go func() { done <- rt.Run(ctx) }()

	var once sync.Once

	stop := func() {
		once.Do(func() {
			cancel()
			assert.NoError(t, <-done, "controller runtime")
		})
	}

	// Cleanups run last-in first-out: the runtime stops before the folders the test made
	// before Start go.
	t.Cleanup(stop)

	return &Env{T: t, Ctx: ctx, State: st, stop: stop}
}

// Stop stops the runtime before the test ends, as a node that dies: its controllers' contexts
// end without any further step, and Ctx with them, so nothing more can be asserted on e.
func (e *Env) Stop() {
	e.stop()
}

// Create creates resources, as the node (or another controller) would.
func (e *Env) Create(rs ...resource.Resource) {
	e.T.Helper()

	for _, r := range rs {
		require.NoError(e.T, e.State.Create(e.Ctx, r), "creating %s", r.Metadata())
	}
}

// Put creates r, or replaces the resource of its ID with it, as the node publishes a new
// machine config.
func (e *Env) Put(r resource.Resource) {
	e.T.Helper()

	cur, err := e.State.Get(e.Ctx, r.Metadata())

	switch {
	case state.IsNotFoundError(err):
		err = e.State.Create(e.Ctx, r)
	case err == nil:
		r.Metadata().SetVersion(cur.Metadata().Version())
		err = e.State.Update(e.Ctx, r)
	}

	require.NoError(e.T, err, "putting %s", r.Metadata())
}

// Destroy destroys resources by their metadata.
func (e *Env) Destroy(rs ...resource.Resource) {
	e.T.Helper()

	for _, r := range rs {
		require.NoError(e.T, e.State.Destroy(e.Ctx, r.Metadata()), "destroying %s", r.Metadata())
	}
}

// WaitFile waits until path exists (a controller that writes files has written it).
func (e *Env) WaitFile(path string) {
	e.T.Helper()

	for {
		if _, err := os.Stat(path); err == nil {
			return
		}

		select {
		case <-e.Ctx.Done():
			e.T.Fatalf("%s did not appear", path)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Update changes an existing resource in place.
func Update[R resource.Resource](e *Env, r R, change func(R) error) R {
	e.T.Helper()

	out, err := safe.StateUpdateWithConflicts(e.Ctx, e.State, r.Metadata(), change)
	require.NoError(e.T, err, "updating %s", r.Metadata())

	return out
}

// AssertResource waits until the resource with id exists and check passes on it.
func AssertResource[R rtestutils.ResourceWithRD](e *Env, id resource.ID, check func(R, *assert.Assertions), opts ...rtestutils.Option) {
	e.T.Helper()

	rtestutils.AssertResource(e.Ctx, e.T, e.State, id, check, opts...)
}

// AssertResources waits until every resource in ids exists and check passes on each.
func AssertResources[R rtestutils.ResourceWithRD](e *Env, ids []resource.ID, check func(R, *assert.Assertions), opts ...rtestutils.Option) {
	e.T.Helper()

	rtestutils.AssertResources(e.Ctx, e.T, e.State, ids, check, opts...)
}

// AssertNoResource waits until the resource with id does not exist.
func AssertNoResource[R rtestutils.ResourceWithRD](e *Env, id resource.ID, opts ...rtestutils.Option) {
	e.T.Helper()

	rtestutils.AssertNoResource[R](e.Ctx, e.T, e.State, id, opts...)
}

// AssertIDs waits until the resources of type R are exactly ids (sorted).
func AssertIDs[R rtestutils.ResourceWithRD](e *Env, ids ...resource.ID) {
	e.T.Helper()

	rtestutils.AssertLength[R](e.Ctx, e.T, e.State, len(ids))
	assert.Equal(e.T, append([]resource.ID{}, ids...), rtestutils.ResourceIDs[R](e.Ctx, e.T, e.State))
}
