package talosctl

import (
	"context"
	"fmt"
	"sort"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/emicklei/dot"
	"github.com/siderolabs/talos/pkg/machinery/api/inspect"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/spf13/cobra"
)

func inspectCmd(g *Global) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "inspect",
		Short: "Inspect internals of Talos",
	}

	var withResources bool

	deps := &cobra.Command{
		Use:   "dependencies",
		Short: "Inspect controller-resource dependencies as graphviz graph.",
		Long: "Prints the node's controllers and the resource types they read and write as a Graphviz graph:\n\n" +
			"    talosctl inspect dependencies | dot -Tpng > graph.png",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.run(cmd, func(ctx context.Context, s *session) error {
				ctx, err := s.single(ctx, "inspect dependencies")
				if err != nil {
					return err
				}

				resp, err := s.c.Inspect.ControllerRuntimeDependencies(ctx)
				if err != nil {
					return fmt.Errorf("reading the controller graph: %w%s", err, hint(err))
				}

				var edges []*inspect.ControllerDependencyEdge
				for _, m := range resp.GetMessages() {
					edges = append(edges, m.GetEdges()...)
				}

				graph := dependencyGraph(edges)

				if withResources {
					if err = addResources(ctx, s.c, graph, edges); err != nil {
						return err
					}
				}

				_, err = fmt.Fprintln(cmd.OutOrStdout(), graph.String())

				return err
			})
		},
	}

	deps.Flags().BoolVar(&withResources, "with-resources", false, "display live resource information with dependencies")
	cmd.AddCommand(deps)

	return cmd
}

// edgeStyles draws outputs from the controller to the type and inputs from the type to the
// controller; weak inputs dashed, destroy-ready inputs dotted, exclusive outputs bold.
var edgeStyles = map[inspect.DependencyEdgeType]struct {
	output bool
	style  string
}{
	inspect.DependencyEdgeType_OUTPUT_EXCLUSIVE:    {true, "bold"},
	inspect.DependencyEdgeType_OUTPUT_SHARED:       {true, "solid"},
	inspect.DependencyEdgeType_INPUT_STRONG:        {false, "solid"},
	inspect.DependencyEdgeType_INPUT_WEAK:          {false, "dashed"},
	inspect.DependencyEdgeType_INPUT_DESTROY_READY: {false, "dotted"},
}

func typeNodeID(ns, typ string) string { return ns + "/" + typ }

// dependencyGraph draws controllers as boxes and resource types (namespace and type) as ovals.
func dependencyGraph(edges []*inspect.ControllerDependencyEdge) *dot.Graph {
	g := dot.NewGraph(dot.Directed)

	for _, e := range edges {
		ctrl := g.Node(e.GetControllerName()).Box()
		typ := g.Node(typeNodeID(e.GetResourceNamespace(), e.GetResourceType())).
			Label(e.GetResourceNamespace() + "\n" + e.GetResourceType())

		st := edgeStyles[e.GetEdgeType()]

		var edge dot.Edge
		if st.output {
			edge = g.Edge(ctrl, typ)
		} else {
			edge = g.Edge(typ, ctrl)
		}

		edge.Attr("style", st.style)

		if id := e.GetResourceId(); id != "" {
			edge.Label(id)
		}
	}

	return g
}

// addResources adds a node per live resource of each type in the graph, linked to its type.
func addResources(ctx context.Context, c *client.Client, g *dot.Graph, edges []*inspect.ControllerDependencyEdge) error {
	types := map[string][2]string{}
	for _, e := range edges {
		types[typeNodeID(e.GetResourceNamespace(), e.GetResourceType())] = [2]string{e.GetResourceNamespace(), e.GetResourceType()}
	}

	ids := make([]string, 0, len(types))
	for id := range types {
		ids = append(ids, id)
	}

	sort.Strings(ids)

	for _, id := range ids {
		ns, typ := types[id][0], types[id][1]

		list, err := c.COSI.List(ctx, resource.NewMetadata(ns, typ, "", resource.VersionUndefined))
		if err != nil {
			return fmt.Errorf("listing %s: %w%s", id, err, hint(err))
		}

		for _, r := range list.Items {
			n := g.Node(id+"/"+r.Metadata().ID()).Label(r.Metadata().ID()).Attr("shape", "note")
			g.Edge(g.Node(id), n).Attr("style", "dotted")
		}
	}

	return nil
}
