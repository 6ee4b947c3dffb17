package talosctl

import (
	"bufio"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// missingCommands are upstream v1.11 commands talosctl does not have yet, each with the reason.
// A command listed here that exists fails the test: take it off the list.
var missingCommands = map[string]string{
	// Upstream runs sonobuoy, which pulls its images and the test suite from the internet; our
	// nodes get images only from the node image's cache or a registry they reach.
}

// missingFlags are flags upstream has on every connecting command that talosctl leaves out.
var missingFlags = map[string]string{
	"--siderov1-keys-dir": "SideroV1 key authentication is Omni's; our nodes take mTLS client certificates only",
}

// flagExceptions are upstream flags talosctl leaves out on purpose, each with the reason; they
// are not gaps. A flag listed here that exists fails the test.
var flagExceptions = map[string]string{
	"cluster create --cni-bin-path":                hostCNI,
	"cluster create --cni-conf-dir":                hostCNI,
	"cluster create --cni-cache-dir":               hostCNI,
	"cluster create --cni-bundle-url":              hostCNI + "; the bundle is downloaded from the internet",
	"cluster create --with-network-chaos":          netem,
	"cluster create --with-network-jitter":         netem,
	"cluster create --with-network-latency":        netem,
	"cluster create --with-network-packet-loss":    netem,
	"cluster create --with-network-packet-reorder": netem,
	"cluster create --with-network-packet-corrupt": netem,
	"cluster create --with-network-bandwidth":      netem,
	"cluster create --with-siderolink":             "SideroLink joins the nodes to Omni (its API and a WireGuard tunnel to it): there is no Omni to join, as for --siderov1-keys-dir",
}

const (
	hostCNI = "upstream's qemu network is built by CNI plugins on the host; ours is built by the cluster's network process (bridge, taps, DHCP), with no host CNI to point at"
	netem   = "upstream shapes the bridge's traffic with the kernel's netem qdisc, which this machine's kernel lacks (no sch_netem): it could not be built or tested here"
)

type upstreamCommand struct {
	path    string
	aliases []string
	flags   []string // "--name", or "-x/--name" with a shorthand
}

func readUpstream(t *testing.T) []upstreamCommand {
	t.Helper()

	f, err := os.Open(filepath.Join("testdata", "upstream-v1.11-commands.txt"))
	if err != nil {
		t.Fatal(err)
	}

	defer f.Close()

	var cmds []upstreamCommand

	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}

		parts := strings.Split(line, "|")
		if len(parts) != 3 {
			t.Fatalf("bad line %q: want path|aliases|flags", line)
		}

		cmds = append(cmds, upstreamCommand{path: parts[0], aliases: fields(parts[1], ","), flags: fields(parts[2], " ")})
	}

	if err = sc.Err(); err != nil {
		t.Fatal(err)
	}

	return cmds
}

func fields(s, sep string) []string {
	if s == "" {
		return nil
	}

	return strings.Split(s, sep)
}

// ourCommands maps each command path below the root ("etcd members") to its command.
func ourCommands() map[string]*cobra.Command {
	out := map[string]*cobra.Command{}

	var walk func(prefix string, c *cobra.Command)
	walk = func(prefix string, c *cobra.Command) {
		for _, sub := range c.Commands() {
			if sub.Hidden || sub.Name() == "help" {
				continue
			}

			path := strings.TrimSpace(prefix + " " + sub.Name())
			out[path] = sub
			walk(path, sub)
		}
	}

	walk("", NewRootCommand())

	return out
}

// ourFlags lists a command's flags, its own and inherited, in the upstream file's form.
func ourFlags(c *cobra.Command) map[string]bool {
	out := map[string]bool{}
	add := func(f *pflag.Flag) {
		out["--"+f.Name] = true
		if f.Shorthand != "" {
			out["-"+f.Shorthand+"/--"+f.Name] = true
		}
	}

	c.LocalFlags().VisitAll(add)
	c.InheritedFlags().VisitAll(add)

	return out
}

// TestUpstreamParity compares talosctl's command tree with upstream v1.11's: every command and
// subcommand must exist (or be on missingCommands with a reason), with upstream's aliases;
// flags that differ are listed in testdata/parity-flag-gaps.txt, which the test keeps exact
// (rewrite it with -update), so a gap closes or opens only on purpose.
func TestUpstreamParity(t *testing.T) {
	upstream := readUpstream(t)
	ours := ourCommands()

	var have, flagGaps []string

	for _, u := range upstream {
		c, ok := ours[u.path]

		reason, excepted := missingCommands[u.path]

		switch {
		case !ok && !excepted:
			t.Errorf("talosctl %s is missing: add it, or list it in missingCommands with the reason", u.path)

			continue
		case !ok:
			continue
		case excepted:
			t.Errorf("talosctl %s exists now: take it off missingCommands (%s)", u.path, reason)
		}

		have = append(have, u.path)

		for _, a := range u.aliases {
			// A sibling command of that name serves too (our `services` beside `service`).
			sibling, isSibling := ours[strings.TrimSpace(strings.TrimSuffix(u.path, c.Name())+a)]
			if !slices.Contains(c.Aliases, a) && (!isSibling || sibling == c) {
				t.Errorf("talosctl %s lacks upstream's alias %q", u.path, a)
			}
		}

		flags := ourFlags(c)

		for _, f := range u.flags {
			long := f[strings.Index(f, "--"):]
			if reason, excepted := flagExceptions[u.path+" "+long]; excepted {
				if flags[f] {
					t.Errorf("talosctl %s %s exists now: take it off flagExceptions (%s)", u.path, long, reason)
				}

				continue
			}

			if _, skip := missingFlags[long]; skip || flags[f] {
				continue
			}

			flagGaps = append(flagGaps, u.path+" "+f)
		}
	}

	t.Logf("parity: %d of %d upstream v1.11 commands and subcommands (%d listed as missing); %d flag gaps, %d flags excepted",
		len(have), len(upstream), len(missingCommands), len(flagGaps), len(flagExceptions))

	golden(t, "parity-flag-gaps.txt", strings.Join(flagGaps, "\n")+"\n")
}
