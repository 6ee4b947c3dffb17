package talosctl

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/spf13/cobra"
)

// waitFlags are the --wait/--timeout pair of the power commands.
type waitFlags struct {
	wait, debug bool
	timeout     time.Duration
}

func (f *waitFlags) register(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&f.wait, "wait", true, "wait for the operation to complete, tracking its progress")
	cmd.Flags().DurationVar(&f.timeout, "timeout", 30*time.Minute, "time to wait for the operation to complete")
	cmd.Flags().BoolVar(&f.debug, "debug", false, "debug operation from kernel logs. --wait is set to true when this flag is set")
}

// waits tells whether to wait for the operation: --wait, or --debug (which needs the wait).
func (f *waitFlags) waits() bool { return f.wait || f.debug }

// waiting runs the wait of an operation; with --debug the nodes' kernel logs are printed to w
// while it runs (each node's until its log stream ends, as it does when the node goes down).
func (f *waitFlags) waiting(ctx context.Context, w io.Writer, s *session, wait func() error) error {
	if !f.debug {
		return wait()
	}

	ctx, cancel := context.WithCancel(ctx)

	var (
		wg sync.WaitGroup
		mu sync.Mutex
	)

	for _, node := range s.nodes {
		stream, err := s.c.Dmesg(s.nodeCtx(ctx, node), true, true)
		if err != nil {
			fmt.Fprintf(w, "%s: kernel log: %v\n", node, err)

			continue
		}

		wg.Add(1)

		go func() {
			defer wg.Done()

			for {
				msg, err := stream.Recv()
				if err != nil {
					return
				}

				mu.Lock()
				for _, line := range strings.SplitAfter(string(msg.GetBytes()), "\n") {
					if line != "" {
						fmt.Fprintf(w, "%s: %s", node, line)
					}
				}
				mu.Unlock()
			}
		}()
	}

	err := wait()

	cancel()
	wg.Wait()

	return err
}

func rebootCmd(g *Global) *cobra.Command {
	var (
		mode string
		wf   waitFlags
	)

	cmd := &cobra.Command{
		Use:   "reboot",
		Short: "Reboot a node",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var opts []client.RebootMode

			switch mode {
			case "default":
			case "powercycle":
				opts = append(opts, client.WithPowerCycle)
			default:
				return fmt.Errorf("unknown --mode %q: use default or powercycle", mode)
			}

			return g.run(cmd, func(ctx context.Context, s *session) error {
				boots := bootIDs(ctx, s)

				resp, err := s.c.RebootWithResponse(s.ctx(ctx), opts...)
				if err := renderReply(cmd, resp, err, func(*machineapi.RebootResponse) error { return nil }); err != nil {
					return err
				}

				if !wf.waits() {
					return nil
				}

				return wf.waiting(ctx, cmd.ErrOrStderr(), s, func() error { return waitNodes(ctx, cmd.ErrOrStderr(), s, boots, true, wf.timeout) })
			})
		},
	}

	cmd.Flags().StringVarP(&mode, "mode", "m", "default", "select the reboot mode: default, powercycle (skips kexec)")
	wf.register(cmd)

	return cmd
}

func shutdownCmd(g *Global) *cobra.Command {
	var (
		force bool
		wf    waitFlags
	)

	cmd := &cobra.Command{
		Use:   "shutdown",
		Short: "Shutdown a node",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.run(cmd, func(ctx context.Context, s *session) error {
				resp, err := s.c.ShutdownWithResponse(s.ctx(ctx), client.WithShutdownForce(force))
				if err := renderReply(cmd, resp, err, func(*machineapi.ShutdownResponse) error { return nil }); err != nil {
					return err
				}

				if !wf.waits() {
					return nil
				}

				return wf.waiting(ctx, cmd.ErrOrStderr(), s, func() error { return waitNodes(ctx, cmd.ErrOrStderr(), s, nil, false, wf.timeout) })
			})
		},
	}

	cmd.Flags().BoolVar(&force, "force", false, "if true, force a node to shutdown without a cordon/drain")
	wf.register(cmd)

	return cmd
}

func resetCmd(g *Global) *cobra.Command {
	var (
		graceful, reboot, insecure bool
		labels, disks              []string
		wipeMode                   string
		wf                         waitFlags
	)

	cmd := &cobra.Command{
		Use:   "reset",
		Short: "Reset a node",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			modes := map[string]machineapi.ResetRequest_WipeMode{
				"all":         machineapi.ResetRequest_ALL,
				"system-disk": machineapi.ResetRequest_SYSTEM_DISK,
				"user-disks":  machineapi.ResetRequest_USER_DISKS,
			}

			m, ok := modes[wipeMode]
			if !ok {
				return fmt.Errorf("unknown --wipe-mode %q: use all, system-disk or user-disks", wipeMode)
			}

			req := &machineapi.ResetRequest{Graceful: graceful, Reboot: reboot, UserDisksToWipe: disks, Mode: m}
			for _, l := range labels {
				req.SystemPartitionsToWipe = append(req.SystemPartitionsToWipe, &machineapi.ResetPartitionSpec{Label: l, Wipe: true})
			}

			return runMaybeInsecure(cmd, g, insecure, &wf, func(ctx context.Context, s *session) error {
				boots := map[string]string{}
				if !insecure {
					boots = bootIDs(ctx, s)
				}

				resp, err := s.c.ResetGenericWithResponse(s.ctx(ctx), req)
				if err := renderReply(cmd, resp, err, func(*machineapi.ResetResponse) error { return nil }); err != nil {
					return err
				}

				if !wf.waits() {
					return nil
				}

				return wf.waiting(ctx, cmd.ErrOrStderr(), s, func() error { return waitNodes(ctx, cmd.ErrOrStderr(), s, boots, reboot, wf.timeout) })
			})
		},
	}

	f := cmd.Flags()
	f.BoolVar(&graceful, "graceful", true, "if true, attempt to cordon/drain node and leave etcd (if applicable)")
	f.BoolVar(&reboot, "reboot", false, "if true, reboot the node after resetting instead of shutting down")
	f.StringSliceVar(&labels, "system-labels-to-wipe", nil, "if set, just wipe selected system disk partitions by label but keep other partitions intact")
	f.StringSliceVar(&disks, "user-disks-to-wipe", nil, "if set, wipes defined devices in the list")
	f.StringVar(&wipeMode, "wipe-mode", "all", "disk reset mode: all, system-disk, user-disks")
	f.BoolVar(&insecure, "insecure", false, "reset using the insecure (encrypted with no auth) maintenance service (does not wait)")
	wf.register(cmd)

	return cmd
}

const bootIDPath = "/proc/sys/kernel/random/boot_id"

// bootIDs reads each node's boot ID before a power operation; a node that doesn't answer is
// left out (its return is then recognised only by the downtime).
func bootIDs(ctx context.Context, s *session) map[string]string {
	ids := map[string]string{}

	for _, node := range s.nodes {
		if id, err := readBootID(s.nodeCtx(ctx, node), s.c); err == nil {
			ids[node] = id
		}
	}

	return ids
}

func readBootID(ctx context.Context, c *client.Client) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()

	r, err := c.Read(ctx, bootIDPath)
	if err != nil {
		return "", err
	}

	defer r.Close()

	b, err := io.ReadAll(r)

	return strings.TrimSpace(string(b)), err
}

// waitNodes shows progress until every node went down (and, with up, came back with a new
// boot ID or after having been unreachable).
func waitNodes(ctx context.Context, progress io.Writer, s *session, boots map[string]string, up bool, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	for _, node := range s.nodes {
		if err := waitNode(s.nodeCtx(ctx, node), progress, s.c, node, boots[node], up); err != nil {
			return fmt.Errorf("%s did not finish within %s: check the node's console or `talosctl -n %s events`, or raise --timeout", node, timeout, node)
		}
	}

	return nil
}

func waitNode(ctx context.Context, progress io.Writer, c *client.Client, node, bootID string, up bool) error {
	fmt.Fprintf(progress, "%s: waiting for the node to go down\n", node)

	wentDown := false

	for {
		id, err := probe(ctx, c)

		switch {
		case err != nil && !wentDown:
			wentDown = true

			if !up {
				fmt.Fprintf(progress, "%s: down\n", node)

				return nil
			}

			fmt.Fprintf(progress, "%s: down, waiting for it to come back\n", node)
		case err == nil && up && (wentDown || (bootID != "" && id != "" && id != bootID)):
			fmt.Fprintf(progress, "%s: back up\n", node)

			return nil
		}

		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// probe checks that the node answers (Version) and returns its boot ID when it can be read.
func probe(ctx context.Context, c *client.Client) (string, error) {
	vctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()

	if _, err := c.Version(vctx); err != nil {
		return "", err
	}

	id, _ := readBootID(ctx, c)

	return id, nil
}

// runMaybeInsecure runs fn through apid, or with insecure through each node's maintenance API
// (a node without a config), where there is nothing to follow the operation with: it does not
// wait.
func runMaybeInsecure(cmd *cobra.Command, g *Global, insecure bool, wf *waitFlags, fn func(ctx context.Context, s *session) error) error {
	if !insecure {
		return g.run(cmd, fn)
	}

	wf.wait, wf.debug = false, false

	return getInsecure(cmd, g.Nodes, fn)
}
