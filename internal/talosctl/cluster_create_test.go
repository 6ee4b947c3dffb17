package talosctl

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"

	"github.com/talos-go/talos/internal/provision"
)

// Bad create flags are refused before anything is made, naming the flag and the fix.
func TestClusterCreateRefusesFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--provisioner", "container", "--kubernetes-version", "1.33.2"}, []string{"--kubernetes-version 1.33.2", "carries Kubernetes 1.34.0", "use 1.34.0"}},
		{[]string{"--control-plane-port", "70000"}, []string{"--control-plane-port 70000", "1-65535"}},
		{[]string{"--registry-mirror", "docker.io"}, []string{`--registry-mirror "docker.io"`, "<registry host>=<mirror URL>"}},
		{[]string{"--registry-mirror", "docker.io=10.5.0.1:5000"}, []string{"is not a URL"}},
		{[]string{"--discovery-endpoint", "discovery.example.test"}, []string{`--discovery-endpoint "discovery.example.test"`, "http://host:port/"}},
		{[]string{"--discovery-endpoint", "https://discovery.example.test/", "--with-cluster-discovery=false"}, []string{"--discovery-endpoint", "--with-cluster-discovery=false", "drop one"}},
		{[]string{"--custom-cni-url", "cni.yaml"}, []string{`--custom-cni-url "cni.yaml"`, "http:// or https://"}},
		{[]string{"--with-firewall", "deny"}, []string{`--with-firewall "deny"`, "accept or block"}},
		{[]string{"--with-firewall", "block"}, []string{"--with-firewall", "--provisioner container or qemu"}},
		{[]string{"--use-vip"}, []string{"--use-vip", "--provisioner qemu"}},
		{[]string{"--with-kubespan"}, []string{"--with-kubespan", "--provisioner qemu"}},
		{[]string{"--ipv6"}, []string{"--ipv6", "--provisioner qemu"}},
		{[]string{"--provisioner", "qemu", "--ipv4=false"}, []string{"--ipv4=false", "add --ipv6"}},
		{[]string{"--provisioner", "qemu", "--ipv4=false", "--ipv6", "--use-vip"}, []string{"--ipv4=false", "--use-vip", "IPv6-only cluster"}},
		{[]string{"--provisioner", "qemu", "--with-kubespan", "--with-cluster-discovery=false"}, []string{"--with-kubespan", "cluster discovery"}},
		{[]string{"--provisioner", "qemu", "--wireguard-cidr", "172.20.1.0/31"}, []string{"--wireguard-cidr 172.20.1.0/31", "too few addresses"}},
		{[]string{"--no-masquerade-cidrs", "10.0.0.0/8"}, []string{"--no-masquerade-cidrs", "--provisioner container or qemu"}},
		{[]string{"--no-masquerade-cidrs", "10.0.0.0"}, []string{`--no-masquerade-cidrs "10.0.0.0"`, "10.0.0.0/8"}},
		{[]string{"--with-tpm2", "--with-tpm1_2"}, []string{"--with-tpm2 and --with-tpm1_2", "choose one"}},
		{[]string{"--with-uuid-hostnames"}, []string{"--with-uuid-hostnames", "--provisioner qemu"}},
		{[]string{"-p", "8080:80"}, []string{"--exposed-ports", "--provisioner container"}},
		{[]string{"--mount", "type=volume,target=/var/x"}, []string{"--mount", "use bind or tmpfs"}},
	} {
		home := t.TempDir()
		args := append([]string{"--talosconfig", home + "/config", "cluster", "create", "--state", home, "--name", "refused", "--machined-path", "/bin/true"}, tc.args...)

		code, out, errOut := run(t, args...)
		if code == 0 {
			t.Fatalf("%v accepted: %s", tc.args, out)
		}

		for _, w := range tc.want {
			if !strings.Contains(errOut, w) {
				t.Errorf("%v: %q not in %q", tc.args, w, errOut)
			}
		}

		// Refused before anything is made.
		if _, err := os.Stat(filepath.Join(home, "refused")); !os.IsNotExist(err) {
			t.Errorf("%v: the refused cluster's folder was made: %v", tc.args, err)
		}
	}
}

// --registry-mirror and --registry-insecure-skip-verify end up in machine.registries.
func TestClusterCreateRegistryFlags(t *testing.T) {
	opts, err := registryOptions(nil, []string{"docker.io=http://10.5.0.1:5000"}, []string{"10.5.0.1:5000"})
	if err != nil {
		t.Fatal(err)
	}

	gen, err := provision.GenerateConfigs("reg", netip.MustParseAddr("127.5.0.2"), "", provision.GenerateOptions{Options: opts})
	if err != nil {
		t.Fatal(err)
	}

	cfg, err := configloader.NewFromBytes(gen.Worker)
	if err != nil {
		t.Fatal(err)
	}

	regs := cfg.Machine().Registries()
	if m := regs.Mirrors()["docker.io"]; m == nil || len(m.Endpoints()) != 1 || m.Endpoints()[0].Endpoint() != "http://10.5.0.1:5000" {
		t.Fatalf("docker.io mirror: %+v", m)
	}

	if c := regs.Config()["10.5.0.1:5000"]; c == nil || !c.TLS().InsecureSkipVerify() {
		t.Fatal("10.5.0.1:5000 does not skip TLS verification")
	}
}

// --with-cluster-discovery=false reaches the configs (discovery off) and starts no discovery
// service; --discovery-endpoint names the given service in them.
func TestClusterCreateDiscoveryFlags(t *testing.T) {
	for _, tc := range []struct {
		flag    string
		enabled bool
		want    string
	}{
		{"--with-cluster-discovery=false", false, ""},
		{"--discovery-endpoint=https://discovery.example.test/", true, "https://discovery.example.test/"},
	} {
		home := t.TempDir()
		t.Chdir(home) // --skip-injecting-config writes the configs to the current folder

		// The nodes (/bin/true) exit at once: only the configs and the cluster's folder count.
		code, out, errOut := run(t, "--talosconfig", home+"/config", "cluster", "create", "--state", home, "--name", "dc", "--machined-path", "/bin/true",
			"--cidr", "127.5.64.0/24", "--skip-injecting-config", tc.flag)
		if code != 0 {
			t.Fatalf("%s: %s %s", tc.flag, out, errOut)
		}

		if strings.Contains(out, "discovery service") {
			t.Errorf("%s: a discovery service was started: %s", tc.flag, out)
		}

		for _, name := range []string{"controlplane.yaml", "worker.yaml", filepath.Join("dc", "dc-worker-1.yaml")} {
			cfg, err := configloader.NewFromFile(filepath.Join(home, name))
			if err != nil {
				t.Fatal(err)
			}

			if d := cfg.Cluster().Discovery(); d.Enabled() != tc.enabled || (tc.enabled && d.Registries().Service().Endpoint() != tc.want) {
				t.Errorf("%s: %s has discovery %v at %s, want %v at %s", tc.flag, name, d.Enabled(), d.Registries().Service().Endpoint(), tc.enabled, tc.want)
			}
		}

		if code, out, errOut = run(t, "cluster", "destroy", "--state", home, "--name", "dc"); code != 0 {
			t.Fatalf("destroy: %s %s", out, errOut)
		}
	}
}
