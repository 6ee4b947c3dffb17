package talosctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"text/tabwriter"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/resource/meta"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"
)

func getCmd(g *Global) *cobra.Command {
	var (
		output, namespace string
		watch, insecure   bool
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
				out, err := newResourceOutput(output, cmd.OutOrStdout(), watch)
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

	cmd.Flags().StringVarP(&output, "output", "o", "table", "output mode (json, table, yaml)")
	cmd.Flags().StringVar(&namespace, "namespace", "", "resource namespace (default is to use default namespace per resource)")
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "watch resource changes")
	cmd.Flags().BoolVarP(&insecure, "insecure", "i", false, "get resources using the insecure (encrypted with no auth) maintenance service")

	return cmd
}

// getResources lists (or gets by id) resources node by node; a node that fails is reported on
// stderr and the others are still shown.
func getResources(ctx context.Context, stderr io.Writer, s *session, out resourceOutput, ns, typ, id string) error {
	failed := false

	for _, node := range s.nodes {
		nctx := s.nodeCtx(ctx, node)

		md, rd, err := resolveKind(nctx, s.c, ns, typ, id)
		if err == nil {
			err = out.define(rd)
		}

		if err == nil {
			err = listOne(nctx, s.c, out, node, md, id)
		}

		if err != nil {
			fmt.Fprintf(stderr, "error: %s: %v%s\n", node, err, hint(err))

			failed = true
		}
	}

	if err := out.flush(); err != nil {
		return err
	}

	if failed {
		return errSilent
	}

	return nil
}

func listOne(ctx context.Context, c *client.Client, out resourceOutput, node string, md resource.Metadata, id string) error {
	if id != "" {
		r, err := c.COSI.Get(ctx, md)
		if err != nil {
			if state.IsNotFoundError(err) {
				return fmt.Errorf("%s %q not found in namespace %q: list them with `talosctl get %s`", md.Type(), id, md.Namespace(), md.Type())
			}

			return err
		}

		return out.write(node, r, state.Created, false)
	}

	list, err := c.COSI.List(ctx, md)
	if err != nil {
		return err
	}

	for _, r := range list.Items {
		if err := out.write(node, r, state.Created, false); err != nil {
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
		return resource.Metadata{}, nil, fmt.Errorf("resolving resource type %q: %w (see the types with `talosctl get rd`)", typ, err)
	}

	return resource.NewMetadata(ns, rd.TypedSpec().Type, id, resource.VersionUndefined), rd, nil
}

// watchResources streams changes from every node until the context ends.
func watchResources(ctx context.Context, stderr io.Writer, s *session, out resourceOutput, ns, typ, id string) error {
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
		nctx := s.nodeCtx(ctx, node)

		md, rd, err := resolveKind(nctx, s.c, ns, typ, id)
		if err == nil {
			err = out.define(rd)
		}

		if err != nil {
			fail(node, err)

			continue
		}

		ch := make(chan state.Event)

		if id != "" {
			err = s.c.COSI.Watch(nctx, md, ch)
		} else {
			err = s.c.COSI.WatchKind(nctx, md, ch, state.WithBootstrapContents(true))
		}

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
			if err := out.write(ne.node, ne.ev.Resource, ne.ev.Type, true); err != nil {
				cancel()

				return err
			}

			if err := out.flush(); err != nil {
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

// resourceOutput renders resources as a table, YAML or JSON.
type resourceOutput interface {
	define(rd *meta.ResourceDefinition) error
	write(node string, r resource.Resource, ev state.EventType, watch bool) error
	flush() error
}

func newResourceOutput(format string, w io.Writer, watch bool) (resourceOutput, error) {
	switch format {
	case "table":
		return &tableOutput{tw: tabwriter.NewWriter(w, 0, 0, 3, ' ', 0), watch: watch}, nil
	case "yaml":
		return &yamlOutput{w: w}, nil
	case "json":
		return &jsonOutput{w: w}, nil
	default:
		return nil, fmt.Errorf("unknown output %q: use table, yaml or json", format)
	}
}

// tableOutput writes NODE NAMESPACE TYPE ID VERSION and the definition's print columns.
type tableOutput struct {
	tw     *tabwriter.Writer
	paths  []string
	watch  bool
	header bool
}

func (t *tableOutput) define(rd *meta.ResourceDefinition) error {
	if t.header {
		return nil
	}

	t.header = true

	head := []string{"NODE", "NAMESPACE", "TYPE", "ID", "VERSION"}
	if t.watch {
		head = append([]string{"NODE", "*"}, head[1:]...)
	}

	for _, col := range rd.TypedSpec().PrintColumns {
		head = append(head, strings.ToUpper(col.Name))
		t.paths = append(t.paths, col.JSONPath)
	}

	_, err := fmt.Fprintln(t.tw, strings.Join(head, "\t"))

	return err
}

func (t *tableOutput) write(node string, r resource.Resource, ev state.EventType, watch bool) error {
	md := r.Metadata()
	row := []string{node}

	if watch {
		row = append(row, eventSymbol(ev))
	}

	row = append(row, md.Namespace(), md.Type(), md.ID(), md.Version().String())

	if len(t.paths) > 0 {
		spec, err := specValue(r)
		if err != nil {
			return err
		}

		for _, p := range t.paths {
			v, err := evalColumn(p, spec)
			if err != nil {
				return err
			}

			row = append(row, v)
		}
	}

	_, err := fmt.Fprintln(t.tw, strings.Join(row, "\t"))

	return err
}

func (t *tableOutput) flush() error { return t.tw.Flush() }

func eventSymbol(ev state.EventType) string {
	switch ev {
	case state.Created:
		return "+"
	case state.Destroyed:
		return "-"
	default:
		return " "
	}
}

// specValue decodes the resource spec into plain maps and lists, through its YAML form.
func specValue(r resource.Resource) (any, error) {
	b, err := yaml.Marshal(r.Spec())
	if err != nil {
		return nil, fmt.Errorf("encoding %s: %w", resource.String(r), err)
	}

	var v any
	if err = yaml.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", resource.String(r), err)
	}

	return v, nil
}

// resourceDoc is the YAML/JSON form: node (and event when watching), metadata, spec.
func resourceDoc(node string, r resource.Resource, ev state.EventType, watch bool) (map[string]any, error) {
	b, err := resourceYAML(r)
	if err != nil {
		return nil, err
	}

	doc := map[string]any{}
	if err = yaml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", resource.String(r), err)
	}

	doc["node"] = node

	if watch {
		doc["event"] = strings.ToLower(ev.String())
	}

	return doc, nil
}

func resourceYAML(r resource.Resource) ([]byte, error) {
	v, err := resource.MarshalYAML(r)
	if err == nil {
		var b []byte

		if b, err = yaml.Marshal(v); err == nil {
			return b, nil
		}
	}

	return nil, fmt.Errorf("encoding %s: %w", resource.String(r), err)
}

type yamlOutput struct {
	w     io.Writer
	count int
}

func (y *yamlOutput) define(*meta.ResourceDefinition) error { return nil }

func (y *yamlOutput) write(node string, r resource.Resource, ev state.EventType, watch bool) error {
	b, err := resourceYAML(r)
	if err != nil {
		return err
	}

	if y.count > 0 {
		fmt.Fprintln(y.w, "---")
	}

	y.count++

	fmt.Fprintf(y.w, "node: %s\n", node)

	if watch {
		fmt.Fprintf(y.w, "event: %s\n", strings.ToLower(ev.String()))
	}

	_, err = y.w.Write(b)

	return err
}

func (y *yamlOutput) flush() error { return nil }

type jsonOutput struct{ w io.Writer }

func (j *jsonOutput) define(*meta.ResourceDefinition) error { return nil }

func (j *jsonOutput) write(node string, r resource.Resource, ev state.EventType, watch bool) error {
	doc, err := resourceDoc(node, r, ev, watch)
	if err != nil {
		return err
	}

	b, err := json.MarshalIndent(doc, "", "    ")
	if err != nil {
		return errors.Join(fmt.Errorf("encoding %s as JSON", resource.String(r)), err)
	}

	_, err = fmt.Fprintf(j.w, "%s\n", b)

	return err
}

func (j *jsonOutput) flush() error { return nil }

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
