// Package faults is the fault suite: a 3 + 1 cluster of process nodes (rootless) whose services
// are killed with SIGKILL at random moments of real operations. Each case checks that the
// service comes back, the cluster is healthy again (the time it took is logged and summed up at
// the end), the machine config on disk is the old or the new one and never torn, the etcd keys
// written before the fault are all readable after, and a fan-out call names the failed node and
// answers for the others.
//
// The choices (which node, which moment) come from one seed, printed at the start: rerun a
// failure with FAULTS_SEED=<seed>. FAULTS_RUNS repeats each case (default 1); the suite is slow
// (about 3 minutes) and skipped by `go test -short`.
package faults

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talos-go/talos/internal/imager"
	"github.com/talos-go/talos/internal/testenv"
)

var (
	binDir      string
	home        string
	clusterName = "faults"
	prefix      = "127.5.41."
	rng         *rand.Rand
	runs        = 1
)

// The cluster: three control planes and one worker; cp1 is the endpoint every call goes to.
var (
	cp1, cp2, cp3, w1 = prefix + "2", prefix + "3", prefix + "4", prefix + "5"
	controlPlanes     = []string{cp1, cp2, cp3}
	allNodes          = []string{cp1, cp2, cp3, w1}
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("FAULTS_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			fmt.Fprintf(os.Stderr, "FAULTS_SEED %q is not a number\n", s)
			return 2
		}

		seed = v
	}

	if s := os.Getenv("FAULTS_RUNS"); s != "" {
		if v, err := strconv.Atoi(s); err == nil && v > 0 {
			runs = v
		}
	}

	fmt.Fprintf(os.Stderr, "faults: seed %d (rerun with FAULTS_SEED=%d), %d run(s) per case\n", seed, seed, runs)
	rng = rand.New(rand.NewPCG(seed, seed^0x5eed))

	var err error

	if home, err = os.MkdirTemp("", "faults-home-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(home)

	if flag.Parse(); testing.Short() {
		return testenv.SkipSuite("faults suite", "skipped with -short (the suite takes minutes)")
	}

	if binDir, err = testenv.Binaries(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer testenv.RemoveBinaries()

	// Nodes trust a key of the suite's own for upgrade images.
	if _, err = imager.GenerateKey(signingKey(), signingKey()+".pub"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}

	create := []string{"cluster", "create", "--name", clusterName, "--controlplanes", "3", "--workers", "1",
		"--cidr", prefix + "0/24", "--wait-timeout", "3m", "--image-keys", signingKey() + ".pub"}

	// A clock-jump run gives the nodes certificates shorter than the jump (TestClockJump).
	if os.Getenv(clockJumpEnv) != "" {
		create = append(create, "--cert-lifetime", clockJumpLifetime.String())
	}

	start := time.Now()
	stdout, stderr, code := cli().Run(nil, create...)
	fmt.Fprintf(os.Stderr, "cluster create: exit %d in %s\n%s%s", code, time.Since(start).Round(time.Millisecond), stdout, stderr)

	defer func() {
		if _, errOut, code := cli().Run(nil, "cluster", "destroy", "--name", clusterName); code != 0 {
			fmt.Fprintf(os.Stderr, "cluster destroy: %s\n", errOut)
		}
	}()

	if code != 0 {
		dumpLogs()
		return 1
	}

	rc := m.Run()
	if rc != 0 {
		dumpLogs()
	}

	printRecoveries()

	return rc
}

func signingKey() string { return filepath.Join(home, "image-signing.key") }

func dumpLogs() {
	logs, _ := filepath.Glob(filepath.Join(home, ".talos", "clusters", clusterName, "*.log"))
	for _, l := range logs {
		fmt.Fprintf(os.Stderr, "==> %s <==\n%s\n", l, testenv.TailFile(l, 4000))
	}
}

func cli() testenv.CLI {
	return testenv.CLI{
		Binary: filepath.Join(binDir, "talosctl"), Home: home,
		TalosConfig: filepath.Join(home, ".talos", "config"), Timeout: 3 * time.Minute,
	}
}

// recoveries collects each case's time from the kill to a healthy cluster, for the summary.
var (
	recMu      sync.Mutex
	recoveries = map[string][]time.Duration{}
)

func recordRecovery(what string, d time.Duration) {
	recMu.Lock()
	defer recMu.Unlock()

	recoveries[what] = append(recoveries[what], d)
}

func printRecoveries() {
	recMu.Lock()
	defer recMu.Unlock()

	keys := make([]string, 0, len(recoveries))
	for k := range recoveries {
		keys = append(keys, k)
	}

	sort.Strings(keys)

	fmt.Fprintln(os.Stderr, "faults: time from the fault (kill -9, clock jump) to a healthy cluster")

	for _, k := range keys {
		ds := recoveries[k]
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })

		var parts []string
		for _, d := range ds {
			parts = append(parts, d.Round(100*time.Millisecond).String())
		}

		fmt.Fprintf(os.Stderr, "  %-32s runs %d  max %-6s  [%s]\n", k, len(ds), ds[len(ds)-1].Round(100*time.Millisecond), strings.Join(parts, " "))
	}
}
