package talosctl

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func upgradeCmd(g *Global) *cobra.Command {
	var (
		image                            string
		preserve, stage, force, insecure bool
		rebootMode                       string
		wf                               waitFlags
	)

	cmd := &cobra.Command{
		Use:   "upgrade",
		Short: "Upgrade Talos on the target node",
		Long: "Upgrade installs a signed node image (built with `make image VERSION=...`) into the node's inactive boot slot " +
			"and reboots into it; a version that does not boot falls back to the previous one. --image is the image file's path on " +
			"the nodes' host (process nodes), its http(s) URL, or an installer image reference REGISTRY/REPOSITORY:TAG or @sha256:DIGEST " +
			"(built with `imager installer --push`), which the node pulls through its machine.registries.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if image == "" {
				return fmt.Errorf("--image is required: the signed image file to install, e.g. _out/talos-v1.11.1.img")
			}

			// A local file is sent as an absolute path: container-mode nodes read it from this host.
			if fi, err := os.Stat(image); err == nil && fi.Mode().IsRegular() {
				if abs, err := filepath.Abs(image); err == nil {
					image = abs
				}
			}

			modes := map[string]machineapi.UpgradeRequest_RebootMode{
				"default":    machineapi.UpgradeRequest_DEFAULT,
				"powercycle": machineapi.UpgradeRequest_POWERCYCLE,
			}

			mode, ok := modes[rebootMode]
			if !ok {
				return fmt.Errorf("unknown --reboot-mode %q: use default or powercycle", rebootMode)
			}

			return runMaybeInsecure(cmd, g, insecure, &wf, func(ctx context.Context, s *session) error {
				// Each node's start before the call: --wait then knows the node restarted even
				// when it already ran the version it upgrades to.
				started := map[string]time.Time{}

				if wf.waits() && !stage {
					for _, node := range s.nodes {
						_, started[node], _ = machineStatus(s.nodeCtx(ctx, node), s)
					}
				}

				resp, err := s.c.UpgradeWithOptions(s.ctx(ctx), client.WithUpgradeImage(image), client.WithUpgradePreserve(preserve),
					client.WithUpgradeStage(stage), client.WithUpgradeForce(force), client.WithUpgradeRebootMode(mode))
				if err := renderReply(cmd, resp, err, func(r *machineapi.UpgradeResponse) error {
					for _, m := range r.Messages {
						fmt.Fprintf(cmd.OutOrStdout(), "%s\t%s\n", nodeOf(m.GetMetadata().GetHostname(), ""), m.Ack)
					}

					return nil
				}); err != nil {
					return err
				}

				if !wf.waits() || stage {
					return nil
				}

				return wf.waiting(ctx, cmd.ErrOrStderr(), s, func() error { return waitUpgraded(ctx, cmd, s, resp, started, wf.timeout) })
			})
		},
	}

	f := cmd.Flags()
	f.StringVarP(&image, "image", "i", "", "the signed node image to upgrade to (a file path in container mode)")
	f.BoolVarP(&preserve, "preserve", "p", false, "preserve data (keep EPHEMERAL and, on a control plane, the etcd member)")
	f.BoolVarP(&stage, "stage", "s", false, "stage the upgrade to perform it after a reboot")
	f.BoolVarP(&force, "force", "f", false, "force the upgrade (skip etcd health and member checks)")
	f.StringVarP(&rebootMode, "reboot-mode", "m", "default", "select the reboot mode during upgrade: default, powercycle")
	f.BoolVar(&insecure, "insecure", false, "upgrade using the insecure (encrypted with no auth) maintenance service (does not wait)")
	wf.register(cmd)

	return cmd
}

// waitUpgraded waits until each node runs the version it acknowledged. A node that went away
// and came back with another version fell back to its previous one and is reported.
func waitUpgraded(ctx context.Context, cmd *cobra.Command, s *session, resp *machineapi.UpgradeResponse, started map[string]time.Time, timeout time.Duration) error {
	target := ""

	for _, m := range resp.GetMessages() {
		if _, v, ok := strings.Cut(m.Ack, "upgrading to "); ok {
			target = v
		}
	}

	if target == "" {
		return nil
	}

	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	var failed []string

	for _, node := range s.nodes {
		if err := waitVersion(s.nodeCtx(ctx, node), cmd.ErrOrStderr(), s, node, target, started[node]); err != nil {
			failed = append(failed, err.Error())
		}
	}

	if len(failed) > 0 {
		return fmt.Errorf("upgrade did not complete:\n%s", strings.Join(failed, "\n"))
	}

	return nil
}

// started is when the node's machine status was made before the upgrade (zero: unknown): the
// node is upgraded once it runs target in a later start, which matters when it ran target
// already (an upgrade to the same version still installs and reboots).
//
//nolint:gocyclo,cyclop // one poll loop over the node's states
func waitVersion(ctx context.Context, progress io.Writer, s *session, node, target string, started time.Time) error {
	fmt.Fprintf(progress, "%s: waiting for %s\n", node, target)

	var (
		wentDown, running bool
		trial             string
	)

	for {
		vctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		v, err := s.c.Version(vctx)
		cancel()

		tag := ""
		if err == nil && len(v.GetMessages()) > 0 {
			tag = v.GetMessages()[0].GetVersion().GetTag()
		}

		switch {
		case tag == target:
			reason, created, known := machineStatus(ctx, s)
			if !known || (!started.IsZero() && !wentDown && created.Equal(started)) {
				break // not restarted yet: the version is the one it ran before
			}

			if !running {
				running = true

				fmt.Fprintf(progress, "%s: running %s\n", node, tag)
			}

			if reason == "" {
				fmt.Fprintf(progress, "%s: %s is permanent\n", node, target)

				return nil
			}

			if reason != trial {
				trial = reason

				fmt.Fprintf(progress, "%s: %s\n", node, trial)
			}
		case tag == "" && !wentDown:
			wentDown = true

			fmt.Fprintf(progress, "%s: rebooting\n", node)
		case tag != "" && (wentDown || running):
			return fmt.Errorf("%s: came back with %s, not %s: the new version did not boot and the node fell back; see `talosctl -n %s logs machined`", node, tag, target, node)
		}

		select {
		case <-ctx.Done():
			if running {
				return fmt.Errorf("%s: runs %s but did not make it permanent within the timeout (%s); the node rolls back if its services do not come up: check `talosctl -n %s services` or raise --timeout", node, target, trial, node)
			}

			return fmt.Errorf("%s: not running %s within the timeout (last: %q, %w); check `talosctl -n %s version` or raise --timeout", node, target, tag, err, node)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// trialCondition reads the node's MachineStatus "upgrade" condition: unmet (its reason) while the
// new slot is on trial, when a crash or a service that does not come up boots the previous
// version again, so the upgrade is not done. known is false when the status could not be read;
// a node without MachineStatus counts as done (it cannot say more than its version).
func machineStatus(ctx context.Context, s *session) (reason string, created time.Time, known bool) {
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()

	ms, err := safe.StateGetByID[*runtimeres.MachineStatus](gctx, s.c.COSI, runtimeres.MachineStatusID)
	if err != nil {
		if state.IsNotFoundError(err) || status.Code(err) == codes.Unimplemented {
			return "", time.Time{}, true
		}

		return "", time.Time{}, false
	}

	created = ms.Metadata().Created()

	for _, c := range ms.TypedSpec().Status.UnmetConditions {
		if c.Name == "upgrade" {
			return c.Reason, created, true
		}
	}

	return "", created, true
}
