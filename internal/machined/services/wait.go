package services

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/state"
	timeres "github.com/siderolabs/talos/pkg/machinery/resources/time"
	"golang.org/x/sys/unix"

	"github.com/talos-go/talos/internal/machined/runtime"
)

// waitTimeSync blocks, on a node that keeps its own clock (metal), until the time status is
// synced, as upstream's services wait: certificates, etcd's leases and kubelet's checks all
// read the clock. Elsewhere the host keeps the clock and nothing waits.
func waitTimeSync(ctx context.Context, r *runtime.Runtime) error {
	if !r.Mode.OwnKernel() {
		return nil
	}

	_, err := r.State.WatchFor(ctx, timeres.NewStatus().Metadata(), state.WithEventTypes(state.Created, state.Updated),
		state.WithCondition(func(res resource.Resource) (bool, error) {
			st, ok := res.(*timeres.Status)

			return ok && st.TypedSpec().Synced, nil
		}))

	return err
}

// waitResource blocks until the resource at ptr exists.
func waitResource(ctx context.Context, st state.State, ptr resource.Pointer) error {
	_, err := st.WatchFor(ctx, ptr, state.WithEventTypes(state.Created, state.Updated))

	return err
}

// waitFiles blocks until every file in names exists in dir. The secrets controllers rename
// each file into place right after the resource it comes from is written, so a service
// waits for that resource first and then sleeps on inotify, woken by the renames, for the
// files themselves.
func waitFiles(ctx context.Context, dir string, names []string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}

	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return fmt.Errorf("watching %s: %w", dir, err)
	}

	// A non-blocking descriptor goes to Go's poller, so a read deadline can end the wait.
	f := os.NewFile(uintptr(fd), "inotify")
	defer f.Close()

	if _, err = unix.InotifyAddWatch(fd, dir, unix.IN_MOVED_TO|unix.IN_CREATE); err != nil {
		return fmt.Errorf("watching %s: %w", dir, err)
	}

	stop := context.AfterFunc(ctx, func() { f.SetReadDeadline(time.Now()) }) //nolint:errcheck // wakes the read; a closed file wakes it too
	defer stop()

	buf := make([]byte, 4096)

	for !allExist(dir, names) {
		if _, err = f.Read(buf); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}

			return fmt.Errorf("watching %s: %w", dir, err)
		}
	}

	return nil
}

func allExist(dir string, names []string) bool {
	for _, name := range names {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			return false
		}
	}

	return true
}
