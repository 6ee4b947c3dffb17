package talosctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/resource/meta"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/talos-go/talos/internal/talosctl/output"
)

func getCmd(g *Global) *cobra.Command {
	var (
		outFormat, namespace string
		watch, insecure      bool
	)

	cmd := &cobra.Command{
		Use:     "get <type> [<id>]",
		Aliases: []string{"g"},
		Short:   "Get a specific resource or list of resources (use 'talosctl get rd' to see all available resource types)",
		Args:    cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var id string
			if len(args) == 2 {
				id = args[1]
			}

			get := func(ctx context.Context, s *session) error {
				out, err := output.NewWriter(outFormat, cmd.OutOrStdout())
				if err != nil {
					return err
				}

				if watch {
					return watchResources(ctx, cmd.ErrOrStderr(), s, out, namespace, args[0], id)
				}

				return getResources(ctx, cmd.ErrOrStderr(), s, out, namespace, args[0], id)
			}

			if insecure {
				return getInsecure(cmd, g.Nodes, get)
			}

			return g.run(cmd, get)
		},
	}

	cmd.Flags().StringVarP(&outFormat, "output", "o", "table", output.Help)
	cmd.Flags().StringVar(&namespace, "namespace", "", "resource namespace (default is to use default namespace per resource)")
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "watch resource changes")
	cmd.Flags().BoolVarP(&insecure, "insecure", "i", false, "get resources using the insecure (encrypted with no auth) maintenance service")

	return cmd
}

// getResources lists (or gets by id) resources node by node; a node that fails is reported on
// stderr and the others are still shown.
func getResources(ctx context.Context, stderr io.Writer, s *session, out output.Writer, ns, typ, id string) error {
	failed := false

	for _, node := range s.nodes {
		nctx := s.nodeCtx(ctx, node)

		md, rd, err := resolveKind(nctx, s.c, ns, typ, id)
		if err == nil {
			err = out.WriteHeader(rd, false)
		}

		if err == nil {
			err = listOne(nctx, s.c, out, node, md, id)
		}

		if err != nil {
			fmt.Fprintf(stderr, "error: %s: %v%s\n", node, err, hint(err))

			failed = true
		}
	}

	if err := out.Flush(); err != nil {
		return err
	}

	if failed {
		return errSilent
	}

	return nil
}

func listOne(ctx context.Context, c *client.Client, out output.Writer, node string, md resource.Metadata, id string) error {
	if id != "" {
		r, err := c.COSI.Get(ctx, md)
		if err != nil {
			if state.IsNotFoundError(err) {
				return fmt.Errorf("%s %q not found in namespace %q: list them with `talosctl get %s`", md.Type(), id, md.Namespace(), md.Type())
			}

			return err
		}

		return out.WriteResource(node, r, state.Created)
	}

	list, err := c.COSI.List(ctx, md)
	if err != nil {
		return err
	}

	for _, r := range list.Items {
		if err := out.WriteResource(node, r, state.Created); err != nil {
			return err
		}
	}

	return nil
}

// resolveKind turns a type name or alias into the resource kind, with the definition's default
// namespace unless one was given.
func resolveKind(ctx context.Context, c *client.Client, ns, typ, id string) (resource.Metadata, *meta.ResourceDefinition, error) {
	rd, err := c.ResolveResourceKind(ctx, &ns, typ)
	if err != nil {
		if status.Code(err) == codes.NotFound {
			return resource.Metadata{}, nil, fmt.Errorf("resolving resource type %q: %w (see the types with `talosctl get rd`)", typ, err)
		}

		return resource.Metadata{}, nil, fmt.Errorf("resolving resource type %q: %w", typ, err)
	}

	return resource.NewMetadata(ns, rd.TypedSpec().Type, id, resource.VersionUndefined), rd, nil
}

// watchResources streams changes from every node until the context ends.
func watchResources(ctx context.Context, stderr io.Writer, s *session, out output.Writer, ns, typ, id string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	type nodeEvent struct {
		node string
		ev   state.Event
	}

	events := make(chan nodeEvent)

	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		failed bool
	)

	fail := func(node string, err error) {
		mu.Lock()
		defer mu.Unlock()

		fmt.Fprintf(stderr, "error: %s: %v%s\n", node, err, hint(err))

		failed = true
	}

	for _, node := range s.nodes {
		ch, err := watchNode(s.nodeCtx(ctx, node), s, out, ns, typ, id)
		if err != nil {
			fail(node, err)

			continue
		}

		wg.Add(1)

		go func() {
			defer wg.Done()

			for {
				select {
				case <-ctx.Done():
					return
				case ev := <-ch:
					select {
					case events <- nodeEvent{node, ev}:
					case <-ctx.Done():
						return
					}
				}
			}
		}()
	}

	go func() {
		wg.Wait()
		close(events)
	}()

	for ne := range events {
		switch ne.ev.Type {
		case state.Errored:
			fail(ne.node, ne.ev.Error)
			cancel()
		case state.Bootstrapped, state.Noop:
		default:
			if err := out.WriteResource(ne.node, ne.ev.Resource, ne.ev.Type); err != nil {
				cancel()

				return err
			}

			if err := out.Flush(); err != nil {
				cancel()

				return err
			}
		}
	}

	if failed {
		return errSilent
	}

	return nil
}

// watchNode writes the output's header for the kind and starts the watch on one node (ctx
// names it): its events come on the channel until ctx ends.
func watchNode(ctx context.Context, s *session, out output.Writer, ns, typ, id string) (<-chan state.Event, error) {
	md, rd, err := resolveKind(ctx, s.c, ns, typ, id)
	if err == nil {
		err = out.WriteHeader(rd, true)
	}

	if err != nil {
		return nil, err
	}

	ch := make(chan state.Event)

	if id != "" {
		err = s.c.COSI.Watch(ctx, md, ch)
	} else {
		err = s.c.COSI.WatchKind(ctx, md, ch, state.WithBootstrapContents(true))
	}

	if err != nil {
		return nil, err
	}

	return ch, nil
}

// getInsecure runs get against each node's maintenance API (hardware, disk and network
// resources of a node that has no config yet).
func getInsecure(cmd *cobra.Command, nodes []string, get func(context.Context, *session) error) error {
	if len(nodes) == 0 {
		return fmt.Errorf("--insecure needs the node addresses: pass them with -n")
	}

	failed := false

	for _, node := range nodes {
		err := withMaintenanceClient(cmd.Context(), node, func(ctx context.Context, c *client.Client) error {
			return get(ctx, &session{c: c, nodes: []string{node}, local: true})
		})
		if errors.Is(err, errSilent) {
			failed = true
		} else if err != nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "error: %s: %v%s\n", node, err, hint(err))

			failed = true
		}
	}

	if failed {
		return errSilent
	}

	return nil
}
