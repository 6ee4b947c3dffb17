// Command kube is one multi-call binary for the Kubernetes v1.34.0 components the node runs:
// kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kube-proxy, each through
// its own cmd package's command constructor, chosen by the name it is called by (a symlink) or
// by its first argument. One binary instead of five shares the Go runtime and the client
// libraries they all link, which keeps the node image small.
//
// This folder is its own Go module so that Kubernetes' dependency graph stays out of the main
// module; internal/imager builds it like the other pinned tools.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	_ "time/tzdata" // CronJob time zones, as the upstream kube-apiserver and controller-manager

	"github.com/spf13/cobra"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // --logging-format=json
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // the version metric
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

// commands maps each component's name to its upstream command constructor.
var commands = map[string]func() *cobra.Command{
	"kube-apiserver":          apiserver.NewAPIServerCommand,
	"kube-controller-manager": controllermanager.NewControllerManagerCommand,
	"kube-scheduler":          func() *cobra.Command { return scheduler.NewSchedulerCommand() },
	"kubelet":                 func() *cobra.Command { return kubelet.NewKubeletCommand(context.Background()) },
	"kube-proxy":              proxy.NewProxyCommand,
}

func main() {
	name, args := filepath.Base(os.Args[0]), os.Args[1:]

	if _, ok := commands[name]; !ok && len(args) > 0 {
		name, args = args[0], args[1:]
	}

	newCommand, ok := commands[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "kube: call it as one of %v (a symlink, or the first argument)\n", names())
		os.Exit(2)
	}

	command := newCommand()
	command.SetArgs(args)
	os.Exit(cli.Run(command))
}

func names() []string {
	out := make([]string, 0, len(commands))
	for n := range commands {
		out = append(out, n)
	}

	sort.Strings(out)

	return out
}
