package talosctl

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/dustin/go-humanize"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/spf13/cobra"
)

// etcdCmd is `talosctl etcd ...`: the cluster's etcd members on control planes.
func etcdCmd(g *Global) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "etcd",
		Short: "Manage etcd",
		Long:  "Manage the etcd cluster of the control plane nodes.",
	}

	alarm := &cobra.Command{
		Use:   "alarm",
		Short: "Manage etcd alarms",
	}
	alarm.AddCommand(etcdAlarmListCmd(g), etcdAlarmDisarmCmd(g))

	cmd.AddCommand(
		etcdMembersCmd(g),
		etcdLeaveCmd(g),
		etcdRemoveMemberCmd(g),
		etcdForfeitCmd(g),
		etcdSnapshotCmd(g),
		etcdStatusCmd(g),
		alarm,
		etcdDefragCmd(g),
		etcdDowngradeCmd(g),
	)

	return cmd
}

func etcdMembersCmd(g *Global) *cobra.Command {
	return &cobra.Command{
		Use:     "members",
		Aliases: []string{"member"},
		Short:   "Get the list of etcd cluster members",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.run(cmd, func(ctx context.Context, s *session) error {
				callPeer, defaultNode := peerNode()
				resp, err := s.c.EtcdMemberList(s.ctx(ctx), &machineapi.EtcdMemberListRequest{QueryLocal: true}, callPeer)

				return renderReply(cmd, resp, err, func(resp *machineapi.EtcdMemberListResponse) error {
					return renderEtcdMembers(cmd.OutOrStdout(), resp, defaultNode())
				})
			})
		},
	}
}

// renderEtcdMembers writes the members table; member IDs are hexadecimal, as etcd prints them.
func renderEtcdMembers(w io.Writer, resp *machineapi.EtcdMemberListResponse, defaultNode string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "NODE\tID\tHOSTNAME\tPEER URLS\tCLIENT URLS\tLEARNER")

	for _, msg := range resp.GetMessages() {
		node := nodeOf(msg.GetMetadata().GetHostname(), defaultNode)

		for _, m := range msg.GetMembers() {
			fmt.Fprintf(tw, "%s\t%016x\t%s\t%s\t%s\t%t\n", node, m.GetId(), m.GetHostname(),
				strings.Join(m.GetPeerUrls(), ","), strings.Join(m.GetClientUrls(), ","), m.GetIsLearner())
		}
	}

	return tw.Flush()
}

func etcdLeaveCmd(g *Global) *cobra.Command {
	return &cobra.Command{
		Use:   "leave",
		Short: "Tell nodes to leave etcd cluster",
		Long:  "The node gives up its etcd membership, stops etcd and wipes its etcd data; refused if the cluster would lose quorum.",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.run(cmd, func(ctx context.Context, s *session) error {
				if err := s.c.EtcdLeaveCluster(s.ctx(ctx), &machineapi.EtcdLeaveClusterRequest{}); err != nil {
					return fmt.Errorf("etcd leave: %w%s", err, hint(err))
				}

				return nil
			})
		},
	}
}

// parseMemberID reads a member ID as etcd prints it (hexadecimal, optional 0x).
func parseMemberID(s string) (uint64, error) {
	id, err := strconv.ParseUint(strings.TrimPrefix(strings.ToLower(s), "0x"), 16, 64)
	if err != nil || id == 0 {
		return 0, fmt.Errorf("invalid member ID %q: use the hexadecimal ID shown by `talosctl etcd members`", s)
	}

	return id, nil
}

func etcdRemoveMemberCmd(g *Global) *cobra.Command {
	return &cobra.Command{
		Use:   "remove-member <member ID>",
		Short: "Remove the node from etcd cluster",
		Long:  "Use this command only if you want to remove a member which is in broken state. If there is no access to the node, or the node can't access etcd to call etcd leave. Always prefer etcd leave over this command.",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseMemberID(args[0])
			if err != nil {
				return err
			}

			return g.run(cmd, func(ctx context.Context, s *session) error {
				ctx, err := s.single(ctx, "etcd remove-member")
				if err != nil {
					return err
				}

				if err := s.c.EtcdRemoveMemberByID(ctx, &machineapi.EtcdRemoveMemberByIDRequest{MemberId: id}); err != nil {
					return fmt.Errorf("etcd remove-member: %w%s", err, hint(err))
				}

				return nil
			})
		},
	}
}

func etcdForfeitCmd(g *Global) *cobra.Command {
	return &cobra.Command{
		Use:   "forfeit-leadership",
		Short: "Tell node to forfeit etcd cluster leadership",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.run(cmd, func(ctx context.Context, s *session) error {
				callPeer, defaultNode := peerNode()
				resp, err := s.c.EtcdForfeitLeadership(s.ctx(ctx), &machineapi.EtcdForfeitLeadershipRequest{}, callPeer)

				return renderReply(cmd, resp, err, func(resp *machineapi.EtcdForfeitLeadershipResponse) error {
					for _, msg := range resp.GetMessages() {
						if msg.GetMember() != "" {
							fmt.Fprintf(cmd.OutOrStdout(), "%s: leadership moved to %s\n",
								nodeOf(msg.GetMetadata().GetHostname(), defaultNode()), msg.GetMember())
						}
					}

					return nil
				})
			})
		},
	}
}

func etcdSnapshotCmd(g *Global) *cobra.Command {
	return &cobra.Command{
		Use:   "snapshot <path>",
		Short: "Stream snapshot of the etcd node to the path.",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := args[0]

			return g.run(cmd, func(ctx context.Context, s *session) error {
				ctx, err := s.single(ctx, "etcd snapshot")
				if err != nil {
					return err
				}

				part := path + ".part"

				f, err := os.OpenFile(part, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
				if err != nil {
					return fmt.Errorf("creating %s: %w", part, err)
				}

				defer os.Remove(part)

				r, err := s.c.EtcdSnapshot(ctx, &machineapi.EtcdSnapshotRequest{})
				if err != nil {
					f.Close()

					return fmt.Errorf("etcd snapshot: %w%s", err, hint(err))
				}

				defer r.Close()

				n, err := io.Copy(f, r)
				if cerr := f.Close(); err == nil {
					err = cerr
				}

				if err != nil {
					return fmt.Errorf("etcd snapshot: %w%s", err, hint(err))
				}

				if n == 0 {
					return fmt.Errorf("etcd snapshot: the node sent no data")
				}

				if err := os.Rename(part, path); err != nil {
					return fmt.Errorf("saving %s: %w", path, err)
				}

				fmt.Fprintf(cmd.OutOrStdout(), "etcd snapshot saved to %q (%d bytes, %s)\n", path, n, humanize.Bytes(uint64(n)))

				return nil
			})
		},
	}
}

func etcdStatusCmd(g *Global) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Get the status of etcd cluster member",
		Long:  "Returns the status of etcd member on the node, use multiple nodes to get status of all members.",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.run(cmd, func(ctx context.Context, s *session) error {
				callPeer, defaultNode := peerNode()
				resp, err := s.c.EtcdStatus(s.ctx(ctx), callPeer)

				return renderReply(cmd, resp, err, func(resp *machineapi.EtcdStatusResponse) error {
					return renderEtcdStatus(cmd.OutOrStdout(), resp, defaultNode())
				})
			})
		},
	}
}

func renderEtcdStatus(w io.Writer, resp *machineapi.EtcdStatusResponse, defaultNode string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "NODE\tMEMBER\tDB SIZE\tIN USE\tLEADER\tRAFT INDEX\tRAFT TERM\tRAFT APPLIED INDEX\tLEARNER\tPROTOCOL\tSTORAGE\tERRORS")

	for _, msg := range resp.GetMessages() {
		st := msg.GetMemberStatus()
		node := nodeOf(msg.GetMetadata().GetHostname(), defaultNode)

		inUse := "0%"
		if st.GetDbSize() > 0 {
			inUse = fmt.Sprintf("%.0f%%", float64(st.GetDbSizeInUse())*100/float64(st.GetDbSize()))
		}

		errs := strings.Join(st.GetErrors(), ", ")
		if errs == "" {
			errs = "<none>"
		}

		fmt.Fprintf(tw, "%s\t%016x\t%s\t%s (%s)\t%016x\t%d\t%d\t%d\t%t\t%s\t%s\t%s\n",
			node, st.GetMemberId(), humanize.Bytes(uint64(st.GetDbSize())),
			humanize.Bytes(uint64(st.GetDbSizeInUse())), inUse, st.GetLeader(),
			st.GetRaftIndex(), st.GetRaftTerm(), st.GetRaftAppliedIndex(), st.GetIsLearner(),
			st.GetProtocolVersion(), st.GetStorageVersion(), errs)
	}

	return tw.Flush()
}

func etcdAlarmListCmd(g *Global) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the etcd alarms for the node.",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.run(cmd, func(ctx context.Context, s *session) error {
				callPeer, defaultNode := peerNode()
				resp, err := s.c.EtcdAlarmList(s.ctx(ctx), callPeer)

				return renderReply(cmd, resp, err, func(resp *machineapi.EtcdAlarmListResponse) error {
					var rows []alarmRow
					for _, m := range resp.GetMessages() {
						rows = append(rows, alarmRow{nodeOf(m.GetMetadata().GetHostname(), defaultNode()), m.GetMemberAlarms()})
					}

					return renderEtcdAlarms(cmd.OutOrStdout(), rows)
				})
			})
		},
	}
}

func etcdAlarmDisarmCmd(g *Global) *cobra.Command {
	return &cobra.Command{
		Use:   "disarm",
		Short: "Disarm the etcd alarms for the node.",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.run(cmd, func(ctx context.Context, s *session) error {
				callPeer, defaultNode := peerNode()
				resp, err := s.c.EtcdAlarmDisarm(s.ctx(ctx), callPeer)

				return renderReply(cmd, resp, err, func(resp *machineapi.EtcdAlarmDisarmResponse) error {
					var rows []alarmRow
					for _, m := range resp.GetMessages() {
						rows = append(rows, alarmRow{nodeOf(m.GetMetadata().GetHostname(), defaultNode()), m.GetMemberAlarms()})
					}

					return renderEtcdAlarms(cmd.OutOrStdout(), rows)
				})
			})
		},
	}
}

// alarmRow is one node's alarms.
type alarmRow struct {
	node   string
	alarms []*machineapi.EtcdMemberAlarm
}

func renderEtcdAlarms(w io.Writer, rows []alarmRow) error {
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "NODE\tMEMBER\tALARM")

	for _, r := range rows {
		for _, a := range r.alarms {
			fmt.Fprintf(tw, "%s\t%016x\t%s\n", r.node, a.GetMemberId(), a.GetAlarm().String())
		}
	}

	return tw.Flush()
}

func etcdDefragCmd(g *Global) *cobra.Command {
	return &cobra.Command{
		Use:   "defrag",
		Short: "Defragment etcd database on the node",
		Long:  "Defragmentation is a maintenance operation that releases unused space from the etcd database file. It is a resource heavy operation, run it on one node at a time.",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.run(cmd, func(ctx context.Context, s *session) error {
				callPeer, _ := peerNode()
				resp, err := s.c.EtcdDefragment(s.ctx(ctx), callPeer)

				return renderReply(cmd, resp, err, func(*machineapi.EtcdDefragmentResponse) error { return nil })
			})
		},
	}
}
