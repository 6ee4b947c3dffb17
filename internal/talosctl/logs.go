package talosctl

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
)

func logsCmd(g *Global) *cobra.Command {
	var (
		follow, kubernetes, cri bool
		tail                    int32
	)

	cmd := &cobra.Command{
		Use:   "logs <service name>",
		Short: "Retrieve logs for a service",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			namespace, driver := constants.SystemContainerdNamespace, common.ContainerDriver_CONTAINERD
			if kubernetes {
				namespace = constants.K8sContainerdNamespace
			}

			if cri {
				driver = common.ContainerDriver_CRI
			}

			return g.run(cmd, func(ctx context.Context, s *session) error {
				stream, err := s.c.Logs(s.ctx(ctx), namespace, driver, args[0], follow, tail)
				if err != nil {
					return nodeErrors(cmd.ErrOrStderr(), err)
				}

				lw := newLogWriter(cmd.OutOrStdout(), cmd.ErrOrStderr())

				for {
					data, err := stream.Recv()
					if errors.Is(err, io.EOF) || client.StatusCode(err) == codes.Canceled {
						break
					}

					if err != nil {
						lw.flush()

						return nodeErrors(cmd.ErrOrStderr(), err)
					}

					lw.write(data)
				}

				lw.flush()

				if lw.failed {
					return errSilent
				}

				return nil
			})
		},
	}

	f := cmd.Flags()
	f.BoolVarP(&follow, "follow", "f", false, "specify if the logs should be streamed")
	f.Int32Var(&tail, "tail", -1, "lines of log file to display (default is to show from the beginning)")
	f.BoolVarP(&kubernetes, "kubernetes", "k", false, "use the k8s.io containerd namespace")
	f.BoolVarP(&cri, "use-cri", "c", false, "use the CRI driver")

	return cmd
}

// logWriter prints a merged multi-node log stream line by line, each line prefixed with its
// node. Chunks may split lines, so each node keeps its unfinished line until the next chunk.
type logWriter struct {
	out, errOut io.Writer
	partial     map[string][]byte
	order       []string
	failed      bool
}

func newLogWriter(out, errOut io.Writer) *logWriter {
	return &logWriter{out: out, errOut: errOut, partial: map[string][]byte{}}
}

func (lw *logWriter) write(data *common.Data) {
	node := data.GetMetadata().GetHostname()

	if e := data.GetMetadata().GetError(); e != "" {
		fmt.Fprintf(lw.errOut, "error: %s: %s\n", node, e)

		lw.failed = true

		return
	}

	if _, ok := lw.partial[node]; !ok {
		lw.order = append(lw.order, node)
	}

	buf := append(lw.partial[node], data.GetBytes()...)

	for {
		i := bytes.IndexByte(buf, '\n')
		if i < 0 {
			break
		}

		lw.line(node, buf[:i])
		buf = buf[i+1:]
	}

	lw.partial[node] = append([]byte(nil), buf...)
}

func (lw *logWriter) line(node string, line []byte) {
	if node == "" {
		fmt.Fprintf(lw.out, "%s\n", line)

		return
	}

	fmt.Fprintf(lw.out, "%s: %s\n", node, line)
}

// flush prints the unfinished last lines.
func (lw *logWriter) flush() {
	for _, node := range lw.order {
		if len(lw.partial[node]) > 0 {
			lw.line(node, lw.partial[node])
			lw.partial[node] = nil
		}
	}
}
