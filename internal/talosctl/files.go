package talosctl

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/dustin/go-humanize"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/spf13/cobra"
)

func lsCmd(g *Global) *cobra.Command {
	var (
		long, recurse, human bool
		depth                int32
		types                []string
	)

	cmd := &cobra.Command{
		Use:     "list [path]",
		Aliases: []string{"ls"},
		Short:   "Retrieve a directory listing",
		Args:    cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			root := "/"
			if len(args) == 1 {
				root = args[0]
			}

			req := &machineapi.ListRequest{Root: root, Recurse: recurse, RecursionDepth: depth}
			if recurse && !cmd.Flags().Changed("depth") {
				req.RecursionDepth = 0
			}

			for _, t := range types {
				lt, err := parseFileType(t)
				if err != nil {
					return err
				}

				req.Types = append(req.Types, lt)
			}

			return g.run(cmd, func(ctx context.Context, s *session) error {
				stream, err := s.c.LS(s.ctx(ctx), req)
				if err != nil {
					return nodeErrors(cmd.ErrOrStderr(), err)
				}

				var infos []*machineapi.FileInfo

				for {
					info, err := stream.Recv()
					if errors.Is(err, io.EOF) {
						break
					}

					if err != nil {
						return nodeErrors(cmd.ErrOrStderr(), err)
					}

					infos = append(infos, info)
				}

				if !renderList(cmd.OutOrStdout(), cmd.ErrOrStderr(), infos, listOptions{long: long, human: human, loc: time.Local}) {
					return errSilent
				}

				return nil
			})
		},
	}

	f := cmd.Flags()
	f.BoolVarP(&long, "long", "l", false, "display additional file details")
	f.BoolVarP(&recurse, "recurse", "r", false, "recurse into subdirectories")
	f.Int32VarP(&depth, "depth", "d", 1, "maximum recursion depth")
	f.BoolVarP(&human, "humanize", "H", false, "humanize size and time in the output")
	f.StringSliceVarP(&types, "type", "t", nil, "filter by specified types: f (regular file), d (directory), l, L (symbolic link)")

	return cmd
}

func parseFileType(t string) (machineapi.ListRequest_Type, error) {
	switch t {
	case "f":
		return machineapi.ListRequest_REGULAR, nil
	case "d":
		return machineapi.ListRequest_DIRECTORY, nil
	case "l", "L":
		return machineapi.ListRequest_SYMLINK, nil
	default:
		return 0, fmt.Errorf("unknown file type %q: use f, d or l", t)
	}
}

type listOptions struct {
	long, human bool
	loc         *time.Location
}

// renderList writes the listing; per-node and per-file errors go to stderr. It returns false
// when there were any.
func renderList(w, stderr io.Writer, infos []*machineapi.FileInfo, o listOptions) bool {
	ok := true
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)

	if o.long {
		fmt.Fprintln(tw, "NODE\tMODE\tUID\tGID\tSIZE(B)\tLASTMOD\tNAME")
	} else {
		fmt.Fprintln(tw, "NODE\tNAME")
	}

	for _, info := range infos {
		node := info.GetMetadata().GetHostname()

		if e := info.GetMetadata().GetError(); e != "" {
			fmt.Fprintf(stderr, "error: %s: %s\n", node, e)

			ok = false

			continue
		}

		if info.GetError() != "" {
			fmt.Fprintf(stderr, "error: %s: %s: %s\n", node, info.GetName(), info.GetError())

			ok = false

			continue
		}

		name := info.GetRelativeName()
		if name == "" {
			name = info.GetName()
		}

		if !o.long {
			fmt.Fprintf(tw, "%s\t%s\n", node, name)

			continue
		}

		if info.GetLink() != "" {
			name += " -> " + info.GetLink()
		}

		size := strconv.FormatInt(info.GetSize(), 10)
		modified := time.Unix(info.GetModified(), 0).In(o.loc)
		lastMod := modified.Format("Jan 2 15:04:05")

		if o.human {
			size = humanize.Bytes(uint64(info.GetSize()))
			lastMod = humanize.Time(modified)
		}

		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\n",
			node, os.FileMode(info.GetMode()).String(), info.GetUid(), info.GetGid(), size, lastMod, name)
	}

	tw.Flush()

	return ok
}

func readCmd(g *Global) *cobra.Command {
	return &cobra.Command{
		Use:     "read <path>",
		Aliases: []string{"cat"},
		Short:   "Read a file on the machine",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.run(cmd, func(ctx context.Context, s *session) error {
				ctx, err := s.single(ctx, "read")
				if err != nil {
					return err
				}

				r, err := s.c.Read(ctx, args[0])
				if err != nil {
					return fmt.Errorf("reading %s: %w%s", args[0], err, hint(err))
				}

				defer r.Close()

				if _, err = io.Copy(cmd.OutOrStdout(), r); err != nil {
					return fmt.Errorf("reading %s: %w%s", args[0], err, hint(err))
				}

				return nil
			})
		},
	}
}

func usageCmd(g *Global) *cobra.Command {
	var (
		human, all bool
		threshold  int64
		depth      int32
	)

	cmd := &cobra.Command{
		Use:     "usage [path1] [path2] ... [pathN]",
		Aliases: []string{"du"},
		Short:   "Retrieve a disk usage",
		RunE: func(cmd *cobra.Command, args []string) error {
			paths := args
			if len(paths) == 0 {
				paths = []string{"/"}
			}

			if depth < 0 {
				return fmt.Errorf("--depth must be 0 or more, got %d", depth)
			}

			return g.run(cmd, func(ctx context.Context, s *session) error {
				// Depth 0 is each path's own total, as du -d 0; the API counts the path as 1.
				stream, err := s.c.DiskUsage(s.ctx(ctx), &machineapi.DiskUsageRequest{RecursionDepth: depth + 1, All: all, Threshold: threshold, Paths: paths})
				if err != nil {
					return nodeErrors(cmd.ErrOrStderr(), err)
				}

				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 3, ' ', 0)
				fmt.Fprintln(tw, "NODE\tSIZE\tNAME")

				failed := false

				for {
					info, err := stream.Recv()
					if errors.Is(err, io.EOF) {
						break
					}

					if err != nil {
						tw.Flush()

						return nodeErrors(cmd.ErrOrStderr(), err)
					}

					node := info.GetMetadata().GetHostname()

					if e := cmp.Or(info.GetMetadata().GetError(), info.GetError()); e != "" {
						fmt.Fprintf(cmd.ErrOrStderr(), "error: %s: %s\n", node, e)

						failed = true

						continue
					}

					size := strconv.FormatInt(info.GetSize(), 10)
					if human {
						size = humanize.Bytes(uint64(max(info.GetSize(), 0)))
					}

					fmt.Fprintf(tw, "%s\t%s\t%s\n", node, size, info.GetRelativeName())
				}

				tw.Flush()

				if failed {
					return errSilent
				}

				return nil
			})
		},
	}

	f := cmd.Flags()
	f.BoolVarP(&human, "humanize", "H", false, "humanize size and time in the output")
	f.BoolVarP(&all, "all", "a", false, "write counts for all files, not just directories")
	f.Int64VarP(&threshold, "threshold", "t", 0, "threshold exclude entries smaller than SIZE if positive, or entries greater than SIZE if negative")
	f.Int32VarP(&depth, "depth", "d", 0, "maximum recursion depth")

	return cmd
}
