package talosctl

import (
	"archive/zip"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/resource/meta"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/formatters"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/talos-go/talos/internal/sensitive"
	"github.com/talos-go/talos/internal/talosctl/output"
)

// supportCmd collects a debug archive: a folder per node with its version, processes, mounts,
// memory, services and their logs, dmesg, resources as YAML (secrets left out) and the machine
// config with secrets redacted. What a node fails to give is recorded in its errors.txt; the
// other nodes and items are still collected.
func supportCmd(g *Global) *cobra.Command {
	var (
		out     string
		workers int
		verbose bool
	)

	cmd := &cobra.Command{
		Use:   "support",
		Short: "Dump debug information about the cluster",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if workers < 1 {
				return fmt.Errorf("--num-workers %d: at least 1", workers)
			}

			if out == "" {
				out = "support.zip"
			}

			if _, err := os.Stat(out); err == nil {
				return fmt.Errorf("%s already exists: remove it or pass another -O", out)
			}

			return g.run(cmd, func(ctx context.Context, s *session) error {
				return collectSupport(ctx, s, out, workers, verbose, cmd.ErrOrStderr())
			})
		},
	}

	cmd.Flags().StringVarP(&out, "output", "O", "", "output file to write support archive to (default support.zip)")
	cmd.Flags().IntVarP(&workers, "num-workers", "w", 1, "number of workers per node")
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "verbose output")

	return cmd
}

// nodeBundle is what was collected from one node: file name to contents, and the failures.
type nodeBundle struct {
	mu     sync.Mutex
	files  map[string][]byte
	errors []string
}

func (b *nodeBundle) add(name string, data []byte, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()

	if err != nil {
		b.errors = append(b.errors, fmt.Sprintf("%s: %v", name, err))

		return
	}

	b.files[name] = data
}

func collectSupport(ctx context.Context, s *session, path string, workers int, verbose bool, progress io.Writer) error {
	bundles := make([]*nodeBundle, len(s.nodes))

	var (
		wg sync.WaitGroup
		mu sync.Mutex
	)

	for i, node := range s.nodes {
		bundles[i] = &nodeBundle{files: map[string][]byte{}}

		wg.Add(1)

		go func() {
			defer wg.Done()

			collectNode(s.nodeCtx(ctx, node), s.c, node, bundles[i], workers, func(item string) {
				if verbose {
					mu.Lock()
					fmt.Fprintf(progress, "%s: collecting %s\n", node, item)
					mu.Unlock()
				}
			})

			mu.Lock()
			fmt.Fprintf(progress, "%s: %d files, %d errors\n", node, len(bundles[i].files), len(bundles[i].errors))
			mu.Unlock()
		}()
	}

	wg.Wait()

	if err := writeSupportArchive(path, s.nodes, bundles); err != nil {
		return err
	}

	fmt.Fprintf(progress, "Support bundle is written to %s\n", path)

	return nil
}

func writeSupportArchive(path string, nodes []string, bundles []*nodeBundle) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("creating the archive: %w", err)
	}

	zw := zip.NewWriter(f)

	for i, node := range nodes {
		b := bundles[i]
		if len(b.errors) > 0 {
			b.files["errors.txt"] = []byte(strings.Join(b.errors, "\n") + "\n")
		}

		names := make([]string, 0, len(b.files))
		for name := range b.files {
			names = append(names, name)
		}

		sort.Strings(names)

		for _, name := range names {
			w, err := zw.CreateHeader(&zip.FileHeader{Name: node + "/" + name, Method: zip.Deflate, Modified: time.Now()})
			if err == nil {
				_, err = w.Write(b.files[name])
			}

			if err != nil {
				f.Close()

				return fmt.Errorf("writing %s/%s to the archive: %w", node, name, err)
			}
		}
	}

	if err = zw.Close(); err != nil {
		f.Close()

		return fmt.Errorf("finishing the archive: %w", err)
	}

	return f.Close()
}

// collectNode gathers every item of one node, workers at a time.
func collectNode(ctx context.Context, c *client.Client, node string, b *nodeBundle, workers int, progress func(string)) {
	type item struct {
		name    string
		collect func() ([]byte, error)
	}

	render := func(fn func(w io.Writer) error) ([]byte, error) {
		var buf bytes.Buffer
		err := fn(&buf)

		return buf.Bytes(), err
	}

	items := []item{
		{"version", func() ([]byte, error) {
			resp, err := c.MachineClient.Version(ctx, &emptypb.Empty{})
			if err != nil {
				return nil, err
			}

			return render(func(w io.Writer) error { return renderVersion(w, resp, "") })
		}},
		{"processes", func() ([]byte, error) {
			resp, err := c.Processes(ctx)
			if err != nil {
				return nil, err
			}

			return render(func(w io.Writer) error { return renderProcesses(w, resp, "", "rss") })
		}},
		{"mounts", func() ([]byte, error) {
			resp, err := c.Mounts(ctx)
			if err != nil {
				return nil, err
			}

			return render(func(w io.Writer) error { return formatters.RenderMounts(resp, w, nil) })
		}},
		{"memory", func() ([]byte, error) {
			resp, err := c.Memory(ctx)
			if err != nil {
				return nil, err
			}

			return render(func(w io.Writer) error { return renderMemoryVerbose(w, resp, "") })
		}},
		{"dmesg", func() ([]byte, error) {
			stream, err := c.Dmesg(ctx, false, false)
			if err != nil {
				return nil, err
			}

			return readData(stream)
		}},
		{"machineconfig.yaml", func() ([]byte, error) { return redactedConfig(ctx, c) }},
	}

	services, err := c.ServiceList(ctx)
	if err != nil {
		b.add("services", nil, err)
	} else {
		for _, m := range services.GetMessages() {
			for _, svc := range m.GetServices() {
				id := svc.GetId()
				items = append(items, item{"service-logs/" + id + ".log", func() ([]byte, error) {
					stream, err := c.Logs(ctx, constants.SystemContainerdNamespace, common.ContainerDriver_CONTAINERD, id, false, -1)
					if err != nil {
						return nil, err
					}

					return readData(stream)
				}})
			}
		}

		data, err := render(func(w io.Writer) error { return renderServices(w, services, "", time.Now()) })
		b.add("services", data, err)
	}

	items = append(items, item{"resources", func() ([]byte, error) { return nil, collectResources(ctx, c, node, b) }})

	var eg errgroup.Group

	eg.SetLimit(workers)

	for _, it := range items {
		eg.Go(func() error {
			progress(it.name)

			data, err := it.collect()
			if it.name != "resources" || err != nil {
				b.add(it.name, data, err)
			}

			return nil
		})
	}

	eg.Wait() //nolint:errcheck // failures are recorded in the bundle
}

// dataStream is any of the byte streams (logs, dmesg).
type dataStream interface {
	Recv() (*common.Data, error)
}

func readData(stream dataStream) ([]byte, error) {
	var buf bytes.Buffer

	for {
		data, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return buf.Bytes(), nil
		}

		if err != nil {
			return buf.Bytes(), err
		}

		if m := data.GetMetadata(); m != nil && m.GetError() != "" {
			return buf.Bytes(), errors.New(m.GetError())
		}

		buf.Write(data.GetBytes())
	}
}

// redactedConfig is the node's machine config with its keys, tokens and secrets replaced.
func redactedConfig(ctx context.Context, c *client.Client) ([]byte, error) {
	mc, err := safe.StateGet[*config.MachineConfig](ctx, c.COSI,
		resource.NewMetadata(config.NamespaceName, config.MachineConfigType, config.ActiveID, resource.VersionUndefined))
	if err != nil {
		return nil, err
	}

	return mc.Provider().RedactSecrets("******").EncodeBytes()
}

// collectResources writes resources/<type>.yaml for every type the node registers, except the
// sensitive ones (package sensitive's rule; the machine config is collected redacted): a
// bundle is made to be shared.
func collectResources(ctx context.Context, c *client.Client, node string, b *nodeBundle) error {
	rds, err := safe.StateListAll[*meta.ResourceDefinition](ctx, c.COSI)
	if err != nil {
		return err
	}

	for rd := range rds.All() {
		spec := rd.TypedSpec()
		if sensitive.Resource(spec.DefaultNamespace, spec.Type) {
			continue
		}

		name := "resources/" + spec.Type + ".yaml"

		list, err := c.COSI.List(ctx, resource.NewMetadata(spec.DefaultNamespace, spec.Type, "", resource.VersionUndefined))
		if err != nil {
			b.add(name, nil, err)

			continue
		}

		var buf bytes.Buffer

		w, _ := output.NewWriter("yaml", &buf)
		w.WriteHeader(rd, false) //nolint:errcheck // yaml keeps no header

		for _, r := range list.Items {
			if err = w.WriteResource(node, r, 0); err != nil {
				break
			}
		}

		b.add(name, buf.Bytes(), err)
	}

	return nil
}
