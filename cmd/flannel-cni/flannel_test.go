package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
)

const talosSubnetEnv = "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n"

func writeFile(t *testing.T, dir, name, data string) string {
	t.Helper()

	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(data), 0o755); err != nil {
		t.Fatal(err)
	}

	return p
}

func TestLoadLease(t *testing.T) {
	for _, tc := range []struct {
		name, env, wantErr string
	}{
		{"ipv4", talosSubnetEnv, ""},
		{"dual stack", talosSubnetEnv + "FLANNEL_IPV6_NETWORK=fd00:10:244::/56\nFLANNEL_IPV6_SUBNET=fd00:10:244:1::1/64\n", ""},
		{"no subnet", "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_MTU=1450\n", "neither FLANNEL_SUBNET"},
		{"no network", "FLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_MTU=1450\n", "without FLANNEL_NETWORK"},
		{"bad subnet", "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1\nFLANNEL_MTU=1450\n", "FLANNEL_SUBNET=10.244.1.1"},
		{"bad mtu", "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_MTU=-3\n", "MTU must be positive"},
		{"no mtu", "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\n", "no FLANNEL_MTU"},
		{"bad ipmasq", talosSubnetEnv + "FLANNEL_IPMASQ=maybe\n", "FLANNEL_IPMASQ"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := loadLease(writeFile(t, t.TempDir(), "subnet.env", tc.env))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one saying %q", err, tc.wantErr)
				}

				return
			}

			if err != nil {
				t.Fatal(err)
			}

			if l.subnet.String() != "10.244.1.0/24" || l.networks[0].String() != "10.244.0.0/16" || l.mtu != 1450 || !l.ipMasq {
				t.Fatalf("lease %+v", l)
			}
		})
	}

	if _, err := loadLease(filepath.Join(t.TempDir(), "missing")); err == nil || !strings.Contains(err.Error(), "does flanneld run") {
		t.Fatalf("missing subnet.env: %v", err)
	}
}

func TestDelegateConf(t *testing.T) {
	dir := t.TempDir()
	l, err := loadLease(writeFile(t, dir, "subnet.env", talosSubnetEnv+"FLANNEL_IPV6_NETWORK=fd00::/56\nFLANNEL_IPV6_SUBNET=fd00:0:0:1::1/64\n"))
	if err != nil {
		t.Fatal(err)
	}

	// Upstream Talos' conflist entry: the delegate sets hairpinMode and isDefaultGateway.
	n, err := loadNetConf([]byte(`{"cniVersion":"1.0.0","name":"cbr0","type":"flannel","delegate":{"hairpinMode":true,"isDefaultGateway":true},"runtimeConfig":{"portMappings":[]}}`))
	if err != nil {
		t.Fatal(err)
	}

	if n.SubnetFile != defaultSubnetFile || n.DataDir != defaultDataDir {
		t.Fatalf("defaults %q %q", n.SubnetFile, n.DataDir)
	}

	raw, err := delegateConf(n, l)
	if err != nil {
		t.Fatal(err)
	}

	var got map[string]any
	if err = json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}

	want := map[string]any{
		"name": "cbr0", "type": "bridge", "cniVersion": "1.0.0", "mtu": 1450.0, "ipMasq": false, "isGateway": true,
		"hairpinMode": true, "isDefaultGateway": true,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}

	if _, ok := got["runtimeConfig"]; !ok {
		t.Error("runtimeConfig (port mappings) not passed to the delegate")
	}

	ipam, _ := json.Marshal(got["ipam"])
	if string(ipam) != `{"ranges":[[{"subnet":"10.244.1.0/24"}],[{"subnet":"fd00:0:0:1::/64"}]],"routes":[{"dst":"10.244.0.0/16"},{"dst":"fd00::/56"}],"type":"host-local"}` {
		t.Errorf("ipam %s", ipam)
	}

	// What the delegate sets wins over flannel's defaults.
	n.Delegate = map[string]any{"type": "ipvlan", "mtu": 9000, "ipMasq": true}
	raw, _ = delegateConf(n, l)
	_ = json.Unmarshal(raw, &got)

	if got["type"] != "ipvlan" || got["mtu"] != 9000.0 || got["ipMasq"] != true {
		t.Errorf("delegate's own settings overridden: %s", raw)
	}

	if strings.Contains(string(raw), "isGateway") {
		t.Errorf("isGateway is a bridge setting, set for ipvlan: %s", raw)
	}
}

// TestAddDel runs ADD and DEL through a delegate that records what it was given: ADD keeps the
// configuration, DEL hands the same one to the delegate even after subnet.env is gone, and a
// second DEL is a no-op.
func TestAddDel(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	record := filepath.Join(dir, "record")

	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}

	writeFile(t, bin, "bridge", "#!/bin/sh\ncat > "+record+".$CNI_COMMAND\necho '{\"cniVersion\":\"1.0.0\",\"ips\":[{\"address\":\"10.244.1.2/24\"}]}'\n")

	subnetEnv := writeFile(t, dir, "subnet.env", talosSubnetEnv)
	dataDir := filepath.Join(dir, "data")
	conf := `{"cniVersion":"1.0.0","name":"cbr0","type":"flannel","subnetFile":"` + subnetEnv + `","dataDir":"` + dataDir + `","delegate":{"hairpinMode":true}}`

	t.Setenv("CNI_PATH", bin)
	t.Setenv("CNI_NETNS", "/proc/self/ns/net")
	t.Setenv("CNI_IFNAME", "eth0")
	t.Setenv("CNI_CONTAINERID", "c1")

	args := &skel.CmdArgs{ContainerID: "c1", Netns: "/proc/self/ns/net", IfName: "eth0", StdinData: []byte(conf)}

	if err := cmdAdd(args); err != nil {
		t.Fatal(err)
	}

	added, err := os.ReadFile(record + ".ADD")
	if err != nil {
		t.Fatal(err)
	}

	if !strings.Contains(string(added), `"subnet":"10.244.1.0/24"`) || !strings.Contains(string(added), `"hairpinMode":true`) {
		t.Fatalf("delegate got %s", added)
	}

	if fi, err := os.Stat(filepath.Join(dataDir, "c1")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("kept configuration: %v %v", fi, err)
	}

	os.Remove(subnetEnv)

	if err = cmdDel(args); err != nil {
		t.Fatal(err)
	}

	deleted, err := os.ReadFile(record + ".DEL")
	if err != nil || string(deleted) != string(added) {
		t.Fatalf("DEL got %s (%v), want what ADD got", deleted, err)
	}

	if _, err = os.Stat(filepath.Join(dataDir, "c1")); !os.IsNotExist(err) {
		t.Fatalf("kept configuration not removed: %v", err)
	}

	if err = cmdDel(args); err != nil {
		t.Fatalf("second DEL: %v", err)
	}

	// ADD without a lease fails, saying why, and keeps nothing.
	if err = cmdAdd(args); err == nil || !strings.Contains(err.Error(), "does flanneld run") {
		t.Fatalf("ADD without subnet.env: %v", err)
	}
}
