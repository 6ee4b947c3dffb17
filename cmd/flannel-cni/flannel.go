package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
)

// Defaults of flannel's plugin: where flanneld writes the lease, where ADD keeps the delegate's
// configuration for DEL.
const (
	defaultSubnetFile = "/run/flannel/subnet.env"
	defaultDataDir    = "/var/lib/cni/flannel"
)

// netConf is the plugin's configuration: the common fields, where to read and keep things, and
// the delegate's configuration to fill in.
type netConf struct {
	types.NetConf

	SubnetFile    string         `json:"subnetFile"`
	DataDir       string         `json:"dataDir"`
	Delegate      map[string]any `json:"delegate"`
	RuntimeConfig map[string]any `json:"runtimeConfig,omitempty"`
}

// lease is what flanneld wrote to subnet.env.
type lease struct {
	networks   []*net.IPNet // FLANNEL_NETWORK: the cluster's pod networks (routes)
	subnet     *net.IPNet   // FLANNEL_SUBNET: this node's share, the bridge's address in it
	ip6Network []*net.IPNet // FLANNEL_IPV6_NETWORK
	ip6Subnet  *net.IPNet   // FLANNEL_IPV6_SUBNET
	mtu        int          // FLANNEL_MTU
	ipMasq     bool         // FLANNEL_IPMASQ: flanneld masquerades itself
}

func loadNetConf(data []byte) (*netConf, error) {
	n := &netConf{SubnetFile: defaultSubnetFile, DataDir: defaultDataDir}
	if err := json.Unmarshal(data, n); err != nil {
		return nil, fmt.Errorf("flannel: reading the network configuration: %w", err)
	}

	return n, nil
}

// loadLease reads subnet.env. A missing file means flanneld has not started on this node yet;
// the error says so, since it is the usual reason pods wait for their network.
func loadLease(path string) (*lease, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("flannel: reading %s (does flanneld run on this node?): %w", path, err)
	}

	l := &lease{}
	sc := bufio.NewScanner(bytes.NewReader(data))

	for sc.Scan() {
		key, value, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		if !ok {
			continue
		}

		switch key {
		case "FLANNEL_NETWORK":
			l.networks, err = parseNetworks(key, value)
		case "FLANNEL_IPV6_NETWORK":
			l.ip6Network, err = parseNetworks(key, value)
		case "FLANNEL_SUBNET":
			l.subnet, err = parseSubnet(key, value)
		case "FLANNEL_IPV6_SUBNET":
			l.ip6Subnet, err = parseSubnet(key, value)
		case "FLANNEL_MTU":
			if l.mtu, err = strconv.Atoi(value); err == nil && l.mtu <= 0 {
				err = errors.New("the MTU must be positive")
			}
		case "FLANNEL_IPMASQ":
			l.ipMasq, err = strconv.ParseBool(value)
		}

		if err != nil && !strings.HasPrefix(err.Error(), key) {
			err = fmt.Errorf("%s=%s: %w", key, value, err)
		}

		if err != nil {
			return nil, fmt.Errorf("flannel: %s: %w", path, err)
		}
	}

	switch {
	case l.subnet == nil && l.ip6Subnet == nil:
		return nil, fmt.Errorf("flannel: %s has neither FLANNEL_SUBNET nor FLANNEL_IPV6_SUBNET", path)
	case l.subnet != nil && len(l.networks) == 0:
		return nil, fmt.Errorf("flannel: %s has FLANNEL_SUBNET without FLANNEL_NETWORK", path)
	case l.ip6Subnet != nil && len(l.ip6Network) == 0:
		return nil, fmt.Errorf("flannel: %s has FLANNEL_IPV6_SUBNET without FLANNEL_IPV6_NETWORK", path)
	case l.mtu == 0:
		return nil, fmt.Errorf("flannel: %s has no FLANNEL_MTU", path)
	}

	return l, nil
}

func parseNetworks(key, value string) ([]*net.IPNet, error) {
	var out []*net.IPNet

	for _, s := range strings.Split(value, ",") {
		_, n, err := net.ParseCIDR(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("%s=%s: %w", key, value, err)
		}

		out = append(out, n)
	}

	return out, nil
}

// parseSubnet returns the network of FLANNEL_SUBNET=10.244.1.1/24 (10.244.1.0/24): host-local
// refuses a range with host bits set, and gives the bridge .1 as its gateway by itself.
func parseSubnet(key, value string) (*net.IPNet, error) {
	_, n, err := net.ParseCIDR(value)
	if err != nil {
		return nil, fmt.Errorf("%s=%s: %w", key, value, err)
	}

	return n, nil
}

// delegateConf is the configuration the delegate gets: what the plugin's `delegate` says,
// with flannel's defaults for what it leaves out (a bridge that is the pods' gateway, the
// lease's MTU, masquerading unless flanneld does it) and host-local addresses from the lease.
func delegateConf(n *netConf, l *lease) ([]byte, error) {
	d := map[string]any{}
	for k, v := range n.Delegate {
		d[k] = v
	}

	setDefault(d, "name", n.Name)
	setDefault(d, "type", "bridge")
	setDefault(d, "ipMasq", !l.ipMasq)
	setDefault(d, "mtu", l.mtu)

	if d["type"] == "bridge" {
		setDefault(d, "isGateway", true)
	}

	if n.CNIVersion != "" {
		d["cniVersion"] = n.CNIVersion
	}

	if len(n.RuntimeConfig) > 0 {
		d["runtimeConfig"] = n.RuntimeConfig
	}

	ipam := map[string]any{}
	if raw, ok := d["ipam"].(map[string]any); ok {
		for k, v := range raw {
			ipam[k] = v
		}
	}

	setDefault(ipam, "type", "host-local")

	var ranges, routes []any

	if l.subnet != nil {
		ranges = append(ranges, []any{map[string]any{"subnet": l.subnet.String()}})
		for _, nw := range l.networks {
			routes = append(routes, map[string]any{"dst": nw.String()})
		}
	}

	if l.ip6Subnet != nil {
		ranges = append(ranges, []any{map[string]any{"subnet": l.ip6Subnet.String()}})
		for _, nw := range l.ip6Network {
			routes = append(routes, map[string]any{"dst": nw.String()})
		}
	}

	ipam["ranges"], ipam["routes"] = ranges, routes
	d["ipam"] = ipam

	return json.Marshal(d)
}

func setDefault(m map[string]any, key string, value any) {
	if _, ok := m[key]; !ok {
		m[key] = value
	}
}

func cmdAdd(args *skel.CmdArgs) error {
	n, err := loadNetConf(args.StdinData)
	if err != nil {
		return err
	}

	l, err := loadLease(n.SubnetFile)
	if err != nil {
		return err
	}

	conf, err := delegateConf(n, l)
	if err != nil {
		return err
	}

	// DEL must undo what ADD set up even after subnet.env changed: keep the configuration.
	saved, err := saveDelegate(n.DataDir, args.ContainerID, conf)
	if err != nil {
		return err
	}

	result, err := invoke.DelegateAdd(context.Background(), delegateType(conf), conf, nil)
	if err != nil {
		os.Remove(saved)

		return err
	}

	return types.PrintResult(result, n.CNIVersion)
}

func cmdDel(args *skel.CmdArgs) error {
	n, err := loadNetConf(args.StdinData)
	if err != nil {
		return err
	}

	saved := savedPath(n.DataDir, args.ContainerID)

	conf, err := os.ReadFile(saved)
	if errors.Is(err, os.ErrNotExist) {
		return nil // never added, or deleted already: DEL is idempotent
	}

	if err != nil {
		return err
	}

	if err = invoke.DelegateDel(context.Background(), delegateType(conf), conf, nil); err != nil {
		return err
	}

	return os.Remove(saved)
}

func cmdCheck(args *skel.CmdArgs) error {
	n, err := loadNetConf(args.StdinData)
	if err != nil {
		return err
	}

	conf, err := os.ReadFile(savedPath(n.DataDir, args.ContainerID))
	if err != nil {
		return fmt.Errorf("flannel: no configuration kept for container %s: %w", args.ContainerID, err)
	}

	return invoke.DelegateCheck(context.Background(), delegateType(conf), conf, nil)
}

func delegateType(conf []byte) string {
	var t struct{ Type string }
	_ = json.Unmarshal(conf, &t)

	return t.Type
}

// savedPath refuses nothing: the runtime gives container IDs without slashes; Base keeps a
// malformed one inside dataDir.
func savedPath(dataDir, containerID string) string {
	return filepath.Join(dataDir, filepath.Base(containerID))
}

func saveDelegate(dataDir, containerID string, conf []byte) (string, error) {
	if containerID == "" {
		return "", errors.New("flannel: CNI_CONTAINERID is empty")
	}

	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return "", err
	}

	p := savedPath(dataDir, containerID)

	return p, os.WriteFile(p, conf, 0o600)
}
