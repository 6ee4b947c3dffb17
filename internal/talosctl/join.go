package talosctl

import (
	"context"
	"fmt"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/spf13/cobra"

	"github.com/talos-go/talos/internal/machined/resources"
	"github.com/talos-go/talos/internal/trustd"
)

// joinCmd decides join requests (docs/join-approval.md): a node without machine.token asks the
// control planes' trustd with its key alone, and is signed once an admin approves that key on
// the control plane it asks. Run it against every control plane (-n cp1,cp2,...): each keeps
// its own decisions.
func joinCmd(g *Global) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "join",
		Short: "Approve or deny nodes that join without the token (see talosctl get joinrequests)",
	}

	decide := func(st trustd.JoinState, verb string) *cobra.Command {
		return &cobra.Command{
			Use:   verb + " <id>",
			Short: verb + " a join request on the given control planes (os:admin)",
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				id := args[0]
				if err := trustd.CheckJoinID(id); err != nil {
					return err
				}

				return g.run(cmd, func(ctx context.Context, s *session) error {
					return eachNode(ctx, cmd.ErrOrStderr(), s, "join "+verb+" "+id, func(ctx context.Context, node string) error {
						if err := setJoinDecision(ctx, s.c.COSI, id, st); err != nil {
							return err
						}

						fmt.Fprintf(cmd.OutOrStdout(), "%s: join request %s %s\n", node, id, st)

						return nil
					})
				})
			},
		}
	}

	cmd.AddCommand(decide(trustd.JoinApproved, "approve"), decide(trustd.JoinDenied, "deny"))

	return cmd
}

// setJoinDecision creates the JoinDecision, or changes an earlier one.
func setJoinDecision(ctx context.Context, st state.State, id string, decision trustd.JoinState) error {
	cur, err := safe.StateGetByID[*resources.JoinDecision](ctx, st, id)
	if state.IsNotFoundError(err) {
		res := resources.NewJoinDecision(id)
		res.TypedSpec().State = string(decision)

		return st.Create(ctx, res)
	}

	if err != nil {
		return err
	}

	cur.TypedSpec().State = string(decision)

	return st.Update(ctx, cur)
}
