// Package talosctl implements the talosctl command line client: client configuration and
// contexts, connections to apid (endpoints and nodes), and the everyday machine API commands.
package talosctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

// Global holds the persistent flags shared by every command.
type Global struct {
	Talosconfig string
	Endpoints   []string
	Nodes       []string
	Context     string
	Cluster     string
	// MachinedSocket, when set, bypasses talosconfig and apid (hidden flag).
	MachinedSocket string
}

// errSilent marks a failure that has already been reported on stderr (for example per-node
// errors of a multi-node reply); the process exits non-zero without printing it again.
var errSilent = errors.New("command failed")

// NewRootCommand builds a fresh talosctl command tree. It keeps no package-level state, so tests
// may build and run as many trees as they like.
func NewRootCommand() *cobra.Command {
	g := &Global{}

	root := &cobra.Command{
		Use:           "talosctl",
		Short:         "A CLI for out-of-band management of Kubernetes nodes created by Talos",
		SilenceUsage:  true,
		SilenceErrors: true,
	}

	pf := root.PersistentFlags()
	pf.StringVar(&g.Talosconfig, "talosconfig", "",
		"The path to the Talos configuration file. Defaults to 'TALOSCONFIG' env variable if set, otherwise '$XDG_CONFIG_HOME/talos/config.yaml' or '$HOME/.talos/config'.")
	pf.StringSliceVarP(&g.Endpoints, "endpoints", "e", nil, "override default endpoints in Talos configuration")
	pf.StringSliceVarP(&g.Nodes, "nodes", "n", nil, "target the specified nodes")
	pf.StringVar(&g.Context, "context", "", "Context to be used in command")
	pf.StringVar(&g.Cluster, "cluster", "", "Cluster to connect to if a proxy endpoint is used.")

	pf.StringVar(&g.MachinedSocket, "machined-socket", "", "talk to machined's unix socket directly, without apid or TLS (tests, on-node debugging)")
	pf.MarkHidden("machined-socket")

	root.AddCommand(
		configCmd(g),
		genCmd(),
		machineconfigCmd(),
		validateCmd(),
		versionCmd(g),
		memoryCmd(g),
		processesCmd(g),
		mountsCmd(g),
		dmesgCmd(g),
		netstatCmd(g),
		cgroupsCmd(g),
		lsCmd(g),
		readCmd(g),
		copyCmd(g),
		editCmd(g),
		usageCmd(g),
		servicesCmd(g),
		containersCmd(g),
		imageCmd(g),
		serviceCmd(g),
		logsCmd(g),
		eventsCmd(g),
		getCmd(g),
		applyConfigCmd(g),
		patchCmd(g),
		rebootCmd(g),
		shutdownCmd(g),
		resetCmd(g),
		upgradeCmd(g),
		upgradeK8sCmd(g),
		conformanceCmd(g),
		rollbackCmd(g),
		kubeconfigCmd(g),
		healthCmd(g),
		completionCmd(),
		clusterCmd(g),
		etcdCmd(g),
		bootstrapCmd(g),
		metaCmd(g),
		restartCmd(g),
		statsCmd(g),
		inspectCmd(g),
		supportCmd(g),
		timeCmd(g),
		wipeCmd(g),
		injectCmd(),
		pcapCmd(g),
		dashboardCmd(g),
		rotateCACmd(g),
		joinCmd(g),
	)

	return root
}

// Execute runs talosctl with args and returns the process exit code.
func Execute(args []string, stdout, stderr io.Writer) int {
	root := NewRootCommand()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if err := root.ExecuteContext(ctx); err != nil {
		if !errors.Is(err, errSilent) {
			fmt.Fprintf(stderr, "error: %v\n", err)
		}

		if isUsageError(err) {
			path := root.Name()
			if cmd, _, findErr := root.Find(args); findErr == nil {
				path = cmd.CommandPath()
			}

			fmt.Fprintf(stderr, "see `%s --help` for the arguments and flags it takes\n", path)
		}

		return 1
	}

	return 0
}

// isUsageError tells cobra's and pflag's complaints about the command line (wrong number of
// arguments, unknown command or flag, bad flag value) from the errors of the work itself.
func isUsageError(err error) bool {
	msg := err.Error()

	for _, prefix := range []string{"accepts ", "requires ", "unknown command", "unknown flag", "unknown shorthand flag", "invalid argument", "flag needs an argument", "unknown action"} {
		if strings.HasPrefix(msg, prefix) {
			return true
		}
	}

	return false
}

// Main is the entry point of cmd/talosctl.
func Main() {
	os.Exit(Execute(os.Args[1:], os.Stdout, os.Stderr))
}
