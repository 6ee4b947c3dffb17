package provision

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"

	"github.com/talos-go/talos/internal/provision/qemu/vm"
)

// DiscoveryPort is the port of the cluster's discovery service on a container or qemu cluster's
// gateway (upstream discovery-service's default). A process cluster's takes a free port: process
// clusters run side by side on one host.
const DiscoveryPort = 3000

// DiscoveryService is the discovery service create starts for the cluster (the nodes find each
// other through it), stopped by destroy.
type DiscoveryService struct {
	Endpoint string `yaml:"endpoint"` // http://host:port/, as the nodes' configs name it
	PID      int    `yaml:"pid,omitempty"`
}

// discoveryAddr is where the cluster's discovery service listens: the cluster network's gateway,
// on DiscoveryPort, or on a port the kernel picks for a process cluster (whose gateway is a
// loopback address no node takes).
func (r Request) discoveryAddr(caps Capabilities) netip.AddrPort {
	port := uint16(DiscoveryPort)
	if !caps.Bridge {
		port = 0
	}

	return netip.AddrPortFrom(Gateway(r.NetworkCIDR()).Addr(), port)
}

// listenDiscovery takes the discovery service's port before anything of the cluster is made, so
// a port in use is refused at once. The bridge of a container or qemu cluster is made later: the
// listener binds its address ahead (vm.ListenOnBridge).
func listenDiscovery(addr netip.AddrPort) (*net.TCPListener, error) {
	ln, err := vm.ListenOnBridge(addr)
	if err != nil {
		return nil, fmt.Errorf("the cluster's discovery service on %s: %w (is another cluster's discovery service using port %d? destroy that cluster, "+
			"use its service with --discovery-endpoint, or start none with --with-cluster-discovery=false)", addr, err, addr.Port())
	}

	return ln, nil
}

// discoveryEndpoint is the URL the nodes' configs name for a service listening on addr: http://
// is plain gRPC, as the nodes read it.
func discoveryEndpoint(addr net.Addr) string { return "http://" + addr.String() + "/" }

// defaultDiscoveryEndpoint names endpoint as the node's discovery service when its config names
// none: a user's patch or --input-dir config that names one keeps it.
func defaultDiscoveryEndpoint(cfg []byte, endpoint string) ([]byte, error) {
	if endpoint == "" {
		return cfg, nil
	}

	loaded, err := configloader.NewFromBytes(cfg)
	if err != nil {
		return nil, err
	}

	if raw := loaded.RawV1Alpha1(); raw == nil || raw.ClusterConfig == nil ||
		(raw.ClusterConfig.ClusterDiscoveryConfig != nil && raw.ClusterConfig.ClusterDiscoveryConfig.DiscoveryRegistries.RegistryService.RegistryEndpoint != "") {
		return cfg, nil
	}

	return patch(cfg, []string{fmt.Sprintf(`{"cluster": {"discovery": {"registries": {"service": {"endpoint": %q}}}}}`, endpoint)})
}

// discoveryReadyTimeout bounds the wait for a started discovery service to accept connections.
const discoveryReadyTimeout = 30 * time.Second

// startDiscovery starts the cluster's discovery service, detached as the nodes are, on ln's
// address (ln, made by listenDiscovery, is closed here), its snapshot and log in the cluster's
// folder, and waits until it accepts connections, so the nodes find it at their first try.
func (c *Cluster) startDiscovery(ln *net.TCPListener, progress io.Writer) error {
	addr := ln.Addr().String()
	dir := filepath.Join(c.Dir, "discovery")

	if err := os.MkdirAll(dir, 0o700); err != nil {
		ln.Close()

		return err
	}

	fmt.Fprintf(progress, "starting the discovery service at %s (snapshot in %s)\n", c.Discovery.Endpoint, dir)

	// The service serves ln itself (fd 3), so the port is never let go between the check and
	// the start. The snapshot path, under the cluster's folder, also names the process for
	// destroy (processRunning).
	f, err := ln.File()
	ln.Close()

	if err != nil {
		return err
	}
	defer f.Close()

	if c.Discovery.PID, err = c.StartDetached("discovery.log", []*os.File{f}, "discovery-service", "--listener-fd", "3", "--addr", addr, "--snapshot", filepath.Join(dir, "snapshot")); err != nil {
		return fmt.Errorf("the discovery service: %w", err)
	}

	deadline := time.Now().Add(discoveryReadyTimeout)

	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()

			return nil
		}

		log := filepath.Join(c.Dir, "discovery.log")

		switch {
		case !processRunning(c.Discovery.PID, c.Dir):
			return fmt.Errorf("the discovery service at %s exited; %s:\n%s", addr, log, tailFile(log, 4<<10))
		case time.Now().After(deadline):
			return fmt.Errorf("the discovery service at %s did not accept connections within %s: %w; %s:\n%s", addr, discoveryReadyTimeout, err, log, tailFile(log, 4<<10))
		}

		time.Sleep(50 * time.Millisecond)
	}
}

// tailFile is the end of a log (its last n bytes), for an error that quotes it.
func tailFile(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}

	return string(data[max(0, len(data)-n):])
}
