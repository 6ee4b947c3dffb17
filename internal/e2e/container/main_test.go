// Package container runs the end-to-end suite on the container provisioner: one control plane
// and one worker, each PID 1 in its own namespaces with the node image as its root, on a bridge.
// It needs root and the node image of `make rootfs`, and runs itself in a network namespace of its own (the
// cluster's bridge is made in the namespace the test runs in).
package container

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/talos-go/talos/internal/container/netnstest"
	"github.com/talos-go/talos/internal/testenv"
)

var (
	binDir, home, talosconfig, stateRoot, image string
	hostMount                                   string // bound read-only at /var/mnt/host in every node (--mount)
	clusterName                                 = fmt.Sprintf("ce2e%d", os.Getpid()%100000)
	before                                      hostState
	destroyed                                   bool
	createdAt                                   time.Time // when cluster create returned
)

// memoryMB are the control plane's and the worker's memory limits: room for Kubernetes when
// the image carries it (the API server alone takes a few hundred MB).
var memoryMB = [2]int64{2048, 1536}

// The cluster's nodes on upstream's docker network.
const (
	cidr = "10.5.0.0/24"
	cp   = "10.5.0.2"
	w    = "10.5.0.3"
	// exposedAPI is the host's port that -p relays to the control plane's apid (the suite's
	// network namespace is its own: the port is free).
	exposedAPI = "127.0.0.1:15000"
)

// The suite makes a bridge and veths: it runs in a network namespace of its own.
func TestMain(m *testing.M) {
	if code, done := netnstest.Isolate(); done {
		os.Exit(code)
	}

	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error

	testenv.KeepOrder("the container e2e suite", "its tests share one cluster that they change on purpose: "+
		"the secrets test reads the worker before cluster_test.go resets it to maintenance, and TestZDestroyLeavesNothing destroys the cluster last")

	reason := skipReason()
	if reason == "" {
		if image, err = nodeImage(); err != nil {
			reason = err.Error()
		}
	}

	if reason != "" {
		return testenv.SkipSuite("container e2e suite", reason)
	}

	for _, d := range []*string{&binDir, &home, &stateRoot, &hostMount} {
		if *d, err = os.MkdirTemp("", "container-e2e-"); err != nil {
			fmt.Fprintln(os.Stderr, err)

			return 1
		}

		defer os.RemoveAll(*d)
	}

	if err = os.WriteFile(filepath.Join(hostMount, "marker"), []byte("from the host\n"), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)

		return 1
	}

	// cluster.extraManifests: the control plane fetches a manifest from the suite, on the
	// bridge's address (listening on every address: the bridge comes with the cluster).
	manifests, err := serveExtraManifest()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)

		return 1
	}
	defer manifests.Close()

	start := time.Now()

	// The host's launcher is machined (static, like the image's), with talosctl.
	os.Setenv("CGO_ENABLED", "0") //nolint:usetesting // TestMain has no t.Setenv

	if out, err := testenv.GoBuild("-trimpath", "-ldflags=-s", "-o", binDir+"/", "github.com/talos-go/talos/cmd/machined",
		"github.com/talos-go/talos/cmd/talosctl"); err != nil {
		fmt.Fprintf(os.Stderr, "building binaries: %v\n%s", err, out)

		return 1
	}

	fmt.Fprintf(os.Stderr, "binaries and node image: %s\n", time.Since(start).Round(time.Millisecond))

	talosconfig = filepath.Join(home, ".talos", "config")

	if before, err = snapshot(); err != nil {
		fmt.Fprintln(os.Stderr, err)

		return 1
	}

	start = time.Now()
	// The nodes' resolver is the bridge's own address, where nothing answers: no test reaches
	// the internet, and CoreDNS starts (it refuses an empty resolv.conf).
	// The command may run a little past its --wait-timeout, never the 4 minutes of other commands:
	// CI runs this suite beside the others on 2 cores, where a create has taken over 4 minutes.
	create := cli()
	create.Timeout = 10 * time.Minute
	stdout, stderr, code := create.Run(nil, "cluster", "create", "--provisioner", "container", "--name", clusterName,
		"--controlplanes", "1", "--workers", "1", "--image", image, "--nameservers", "10.5.0.1",
		"--memory", fmt.Sprint(memoryMB[0]), "--memory-workers", fmt.Sprint(memoryMB[1]), "--wait-timeout", "8m",
		"--mount", "type=bind,source="+hostMount+",target=/var/mnt/host,readonly",
		"-p", "15000:50000/tcp", "--docker-host-ip", "127.0.0.1",
		"--config-patch-control-plane", fmt.Sprintf(`{"cluster": {"extraManifests": ["http://10.5.0.1:%d/extra.yaml"]}}`, manifests.Addr().(*net.TCPAddr).Port))
	fmt.Fprintf(os.Stderr, "cluster create: exit %d in %s\n%s%s", code, time.Since(start).Round(time.Millisecond), stdout, stderr)

	defer func() {
		if destroyed {
			return
		}

		if _, errOut, code := talosctl(nil, "cluster", "destroy", "--name", clusterName); code != 0 {
			fmt.Fprintf(os.Stderr, "cluster destroy: %s\n", errOut)
		}
	}()

	if code != 0 {
		dumpLogs()

		return 1
	}

	createdAt = time.Now()

	rc := m.Run()
	if rc != 0 {
		dumpLogs()
		dumpNodes()
	}

	return rc
}

// skipReason says why the suite cannot run here, or "".
func skipReason() string {
	if os.Geteuid() != 0 {
		return "the container provisioner needs root (namespaces, a bridge, loop mounts, cgroups); run as root, in nsrun"
	}

	fss, _ := os.ReadFile("/proc/filesystems")
	for _, fs := range []string{"squashfs", "overlay"} {
		if !strings.Contains(string(fss), "\t"+fs+"\n") {
			return "the kernel has no " + fs + " (modprobe " + fs + ")"
		}
	}

	return ""
}

// nodeImage is the node image the suite boots: the real one of `make rootfs` (containerd, CRI,
// etcd through containerd), or $E2E_NODE_IMAGE. The suite is skipped without it.
func nodeImage() (string, error) {
	if p := os.Getenv("E2E_NODE_IMAGE"); p != "" {
		return p, nil
	}

	p, err := filepath.Abs("../../../_out/rootfs.sqsh")
	if err != nil {
		return "", err
	}

	if _, err = os.Stat(p); err != nil {
		return "", fmt.Errorf("no node image at %s: build it with `make rootfs` (or set E2E_NODE_IMAGE)", p)
	}

	return p, nil
}

func dumpLogs() {
	logs, _ := filepath.Glob(filepath.Join(stateRoot, clusterName, "*.log"))
	for _, l := range logs {
		data, _ := os.ReadFile(l)
		if len(data) > 6000 {
			data = data[len(data)-6000:]
		}

		fmt.Fprintf(os.Stderr, "==> %s <==\n%s\n", l, data)
	}
}

// talosctl runs the built talosctl with the test's HOME, talosconfig and cluster state folder.
func talosctl(t *testing.T, args ...string) (string, string, int) {
	if t == nil { // from TestMain: a nil *testing.T must not become a non-nil testing.TB
		return cli().Run(nil, args...)
	}

	return cli().Run(t, args...)
}

// must runs talosctl and fails the test on a non-zero exit.
func must(t *testing.T, args ...string) string {
	t.Helper()

	return cli().Must(t, args...)
}

func cli() testenv.CLI {
	return testenv.CLI{
		Binary: filepath.Join(binDir, "talosctl"), Home: home, TalosConfig: talosconfig,
		ClusterRoot: stateRoot, Timeout: 4 * time.Minute,
	}
}

// extraManifest is the manifest the suite serves for cluster.extraManifests.
const extraManifest = `apiVersion: v1
kind: ConfigMap
metadata:
  name: from-extra-manifest
  namespace: default
data:
  served-by: the e2e suite
`

func serveExtraManifest() (net.Listener, error) {
	l, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		return nil, err
	}

	go http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/extra.yaml" {
			http.NotFound(w, r)

			return
		}

		w.Write([]byte(extraManifest))
	}))

	return l, nil
}

// dumpNodes prints each Kubernetes node's conditions and taints: why pods stay Pending or fail
// (DiskPressure, NotReady) is there, not in the nodes' logs.
func dumpNodes() {
	path := filepath.Join(home, "kubeconfig-dump")
	if _, errOut, code := talosctl(nil, "-n", cp, "kubeconfig", path); code != 0 {
		fmt.Fprintf(os.Stderr, "nodes: no kubeconfig: %s\n", errOut)

		return
	}

	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		fmt.Fprintf(os.Stderr, "nodes: %v\n", err)

		return
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	nodes, err := kubernetes.NewForConfigOrDie(cfg).CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		fmt.Fprintf(os.Stderr, "nodes: %v\n", err)

		return
	}

	for _, n := range nodes.Items {
		fmt.Fprintf(os.Stderr, "node %s taints %v\n", n.Name, n.Spec.Taints)

		for _, c := range n.Status.Conditions {
			fmt.Fprintf(os.Stderr, "  %s=%s %s: %s\n", c.Type, c.Status, c.Reason, c.Message)
		}
	}
}
