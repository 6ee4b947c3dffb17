package talosctl

import (
	"context"
	"fmt"
	"io"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// eachNode calls fn once per target node and reports each failure as "error: NODE: WHAT:
// message", going on with the other nodes; it returns errSilent if any failed. A node that does
// not implement the method is told apart, so the user sees which node lacks what.
func eachNode(ctx context.Context, stderr io.Writer, s *session, what string, fn func(ctx context.Context, node string) error) error {
	failed := false

	for _, node := range s.nodes {
		err := fn(s.nodeCtx(ctx, node), node)
		if err == nil {
			continue
		}

		failed = true

		if st, ok := status.FromError(err); ok && st.Code() == codes.Unimplemented {
			fmt.Fprintf(stderr, "error: %s: %s: the node does not implement it (%s)\n", node, what, st.Message())

			continue
		}

		fmt.Fprintf(stderr, "error: %s: %s: %s%s\n", node, what, status.Convert(err).Message(), hint(err))
	}

	if failed {
		return errSilent
	}

	return nil
}
