package vm

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/server4"
	"github.com/insomniacslk/dhcp/dhcpv6/server6"
	kmsapi "github.com/siderolabs/kms-client/api/kms"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"

	"github.com/talos-go/talos/internal/kms"
)

// LeaseTime is how long the nodes' DHCP leases last (unless NetworkSpec.LeaseTime says).
const LeaseTime = 24 * time.Hour

// NetworkSpec is what a cluster's network process gets: the bridge it serves on and each
// node's lease and config.
type NetworkSpec struct {
	Bridge string `json:"bridge"`
	// Gateway is the bridge's address: the nodes' router and server (IPv6 in an IPv6-only
	// cluster, which gets no DHCPv4).
	Gateway     netip.Prefix `json:"gateway"`
	Nameservers []netip.Addr `json:"nameservers,omitempty"`
	Nodes       []NodeLease  `json:"nodes"`
	NoHostname  bool         `json:"noHostname,omitempty"` // the leases name no hostname
	// LeaseTime is how long a lease lasts; zero: the LeaseTime constant.
	LeaseTime time.Duration `json:"leaseTime,omitempty"`
	// JSONLogs, when set, is the file the nodes' json_lines logs are appended to, received on
	// the gateway's JSONLogsPort (TCP).
	JSONLogs string `json:"jsonLogs,omitempty"`
	// IPXEBootScript, when set, is the boot file (a URL) given to iPXE clients: a node booting
	// from the network (its disk blank) runs that script.
	IPXEBootScript string `json:"ipxeBootScript,omitempty"`
	// KMSKey, when set, is the file of the key the KMS on the gateway's KMSPort seals the nodes'
	// disk encryption keys with (made when missing).
	KMSKey string `json:"kmsKey,omitempty"`
	// IPv6, when valid, is the cluster's IPv6 network (--ipv6): it is advertised on the bridge
	// (router advertisements: on-link, addresses from DHCPv6), and the nodes lease their
	// addresses in it over DHCPv6 (NodeLease.Address6).
	IPv6 netip.Prefix `json:"ipv6,omitempty"`
	// DNSUpstreams are the servers the DNS on the gateway forwards to; none: the host's
	// resolv.conf's.
	DNSUpstreams []netip.AddrPort `json:"dnsUpstreams,omitempty"`
}

// ListenOnBridge listens on TCP at addr, an address of the cluster's bridge, before the bridge
// is up: until a node's tap joins it has no carrier, and its IPv6 address stays tentative, which
// a plain bind refuses (IP_FREEBIND lets it).
func ListenOnBridge(addr netip.AddrPort) (*net.TCPListener, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_IP, unix.IP_FREEBIND, 1) }); err != nil {
			return err
		}

		return serr
	}}

	l, err := lc.Listen(context.Background(), "tcp", addr.String())
	if err != nil {
		return nil, err
	}

	tl, ok := l.(*net.TCPListener)
	if !ok {
		l.Close()

		return nil, fmt.Errorf("listening on %s: not a TCP listener", addr)
	}

	return tl, nil
}

// KMSPort is where the network process serves the KMS API (upstream's port).
const KMSPort = 4050

// JSONLogsPort is where the network process receives the nodes' logs (upstream's port).
const JSONLogsPort = 4003

// NodeLease is one node's fixed lease and its config file.
type NodeLease struct {
	Name    string     `json:"name"`
	MAC     string     `json:"mac"`
	Address netip.Addr `json:"address"` // DHCPv4's; none in an IPv6-only cluster
	// Address6 is DHCPv6's, with NetworkSpec.IPv6.
	Address6 netip.Addr `json:"address6,omitzero"`
	Config   string     `json:"config"` // served at ConfigPath(Name)
}

// ConfigPath is where the network process serves a node's config.
func ConfigPath(node string) string { return "/config/" + node + ".yaml" }

// NetworkMain is `machined qemu-network --spec <json>`, with the config server's listener (on
// the bridge's address, made by the caller so that its port is known) as fd 3. It serves until
// SIGTERM or SIGINT.
func NetworkMain(args []string) error {
	fs := flag.NewFlagSet("qemu-network", flag.ContinueOnError)
	specJSON := fs.String("spec", "", "the cluster's network, as JSON (written by talosctl cluster create)")

	if err := fs.Parse(args); err != nil {
		return err
	}

	var spec NetworkSpec
	if err := json.Unmarshal([]byte(*specJSON), &spec); err != nil {
		return fmt.Errorf("--spec: %w", err)
	}

	l, err := net.FileListener(os.NewFile(3, "config listener"))
	if err != nil {
		return fmt.Errorf("the config server's listener (fd 3): %w", err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	return Serve(ctx, spec, l)
}

// dhcpServer is server4's and server6's.
type dhcpServer interface {
	Serve() error
	Close() error
}

// Serve answers DHCP (v4, and v6 with IPv6) on the bridge, serves the configs on l, and NTP and
// DNS on the gateway's address, until ctx ends.
func Serve(ctx context.Context, spec NetworkSpec, l net.Listener) error {
	var (
		dhcp, dhcp6 dhcpServer // nil: that family is not served
		err         error
	)

	if spec.Gateway.Addr().Is4() {
		if dhcp, err = server4.NewServer(spec.Bridge, nil, spec.HandleDHCP); err != nil {
			return fmt.Errorf("DHCP server on %s: %w", spec.Bridge, err)
		}
	}

	if spec.IPv6.IsValid() {
		handler, err := spec.DHCP6Handler()
		if err != nil {
			return fmt.Errorf("DHCPv6 server on %s: %w", spec.Bridge, err)
		}

		if dhcp6, err = server6.NewServer(spec.Bridge, nil, handler); err != nil {
			return fmt.Errorf("DHCPv6 server on %s: %w", spec.Bridge, err)
		}
	}

	srv := &http.Server{Handler: http.HandlerFunc(spec.serveConfig), ReadHeaderTimeout: 10 * time.Second}

	if spec.JSONLogs != "" {
		f, err := os.OpenFile(spec.JSONLogs, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return fmt.Errorf("the JSON logs receiver: %w", err)
		}
		defer f.Close()

		logs, err := ListenOnBridge(netip.AddrPortFrom(spec.Gateway.Addr(), JSONLogsPort))
		if err != nil {
			return fmt.Errorf("the JSON logs receiver: %w", err)
		}
		defer logs.Close()

		go receiveLogs(logs, f)

		fmt.Fprintf(os.Stderr, "[network] nodes' JSON logs received at %s, written to %s\n", logs.Addr(), spec.JSONLogs)
	}

	if spec.KMSKey != "" {
		stop, err := serveKMS(spec.KMSKey, netip.AddrPortFrom(spec.Gateway.Addr(), KMSPort))
		if err != nil {
			return fmt.Errorf("the KMS: %w", err)
		}
		defer stop()
	}

	defer spec.serveTimeAndNames()()

	errs := make(chan error, 4)

	if spec.IPv6.IsValid() {
		go func() {
			if err := advertise(ctx, spec.Bridge, spec.IPv6); err != nil {
				errs <- err
			}
		}()

		fmt.Fprintf(os.Stderr, "[network] advertising %s on %s\n", spec.IPv6, spec.Bridge)
	}

	for _, s := range []dhcpServer{dhcp, dhcp6} {
		if s != nil {
			go func() { errs <- s.Serve() }()
			defer s.Close()
		}
	}

	go func() { errs <- srv.Serve(l) }()

	fmt.Fprintf(os.Stderr, "[network] DHCP on %s, configs at http://%s\n", spec.Bridge, l.Addr())

	select {
	case err = <-errs:
	case <-ctx.Done():
	}

	srv.Close()

	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}

	return err
}

// serveKMS serves the KMS API on addr (plain gRPC: the nodes' config names grpc://, as
// upstream's cluster create does).
func serveKMS(keyFile string, addr netip.AddrPort) (func(), error) {
	key, err := kms.LoadOrCreateKey(keyFile)
	if err != nil {
		return nil, err
	}

	srv, err := kms.NewServer(key)
	if err != nil {
		return nil, err
	}

	l, err := ListenOnBridge(addr)
	if err != nil {
		return nil, err
	}

	g := grpc.NewServer()
	kmsapi.RegisterKMSServiceServer(g, srv)

	go g.Serve(l) //nolint:errcheck // ends with Stop

	fmt.Fprintf(os.Stderr, "[network] KMS at grpc://%s\n", addr)

	return g.Stop, nil
}

// receiveLogs appends every line the nodes send on l to f, until l is closed. An accept that
// fails otherwise (out of file descriptors, say) is retried: the receiver never ends the
// network process.
func receiveLogs(l net.Listener, f *os.File) {
	var mu sync.Mutex

	for {
		conn, err := l.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}

		if err != nil {
			fmt.Fprintf(os.Stderr, "[network] JSON logs: %v\n", err)
			time.Sleep(100 * time.Millisecond)

			continue
		}

		go func() {
			defer conn.Close()

			for s := bufio.NewScanner(conn); s.Scan(); {
				mu.Lock()
				f.Write(append(s.Bytes(), '\n')) //nolint:errcheck // a full disk loses log lines only
				mu.Unlock()
			}
		}()
	}
}

// HandleDHCP answers a node's DISCOVER with an offer of its address and its REQUEST with an
// ACK (a NAK when it asks for another address); other clients get nothing.
func (s NetworkSpec) HandleDHCP(conn net.PacketConn, peer net.Addr, m *dhcpv4.DHCPv4) {
	if m.OpCode != dhcpv4.OpcodeBootRequest {
		return
	}

	var lease *NodeLease

	for i := range s.Nodes {
		if strings.EqualFold(s.Nodes[i].MAC, m.ClientHWAddr.String()) {
			lease = &s.Nodes[i]
		}
	}

	if lease == nil {
		return
	}

	var typ dhcpv4.MessageType

	switch m.MessageType() {
	case dhcpv4.MessageTypeDiscover:
		typ = dhcpv4.MessageTypeOffer
	case dhcpv4.MessageTypeRequest:
		typ = dhcpv4.MessageTypeAck

		asked := m.RequestedIPAddress()
		if asked == nil || asked.IsUnspecified() {
			asked = m.ClientIPAddr
		}

		if ip, ok := netip.AddrFromSlice(asked.To4()); !ok || ip != lease.Address {
			typ = dhcpv4.MessageTypeNak
		}
	default:
		return
	}

	gw := net.IP(s.Gateway.Addr().AsSlice())
	mods := []dhcpv4.Modifier{
		dhcpv4.WithMessageType(typ), dhcpv4.WithServerIP(gw), dhcpv4.WithOption(dhcpv4.OptServerIdentifier(gw)),
	}

	if typ != dhcpv4.MessageTypeNak {
		dns := make([]net.IP, 0, len(s.Nameservers))
		for _, a := range s.Nameservers {
			if a.Is4() {
				dns = append(dns, a.AsSlice())
			}
		}

		mods = append(mods,
			dhcpv4.WithYourIP(lease.Address.AsSlice()),
			dhcpv4.WithNetmask(net.CIDRMask(s.Gateway.Bits(), 32)),
			dhcpv4.WithRouter(gw),
			dhcpv4.WithLeaseTime(uint32(cmp.Or(s.LeaseTime, LeaseTime)/time.Second)),
		)

		if !s.NoHostname {
			mods = append(mods, dhcpv4.WithOption(dhcpv4.OptHostName(lease.Name)))
		}

		if len(dns) > 0 {
			mods = append(mods, dhcpv4.WithDNS(dns...))
		}

		// iPXE says who it is in the user class; other PXE clients get no boot file.
		if s.IPXEBootScript != "" && slices.Contains(m.UserClass(), "iPXE") {
			mods = append(mods, dhcpv4.WithOption(dhcpv4.OptBootFileName(s.IPXEBootScript)), func(d *dhcpv4.DHCPv4) { d.BootFileName = s.IPXEBootScript })
		}
	}

	reply, err := dhcpv4.NewReplyFromRequest(m, mods...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "[network] DHCP reply to %s: %v\n", lease.Name, err)

		return
	}

	if _, err = conn.WriteTo(reply.ToBytes(), peer); err != nil {
		fmt.Fprintf(os.Stderr, "[network] DHCP reply to %s: %v\n", lease.Name, err)

		return
	}

	fmt.Fprintf(os.Stderr, "[network] DHCP %s: %s to %s (%s)\n", m.MessageType(), typ, lease.Name, lease.Address)
}

// serveConfig gives a node its config, and only to the node itself (by its leased address):
// the config holds the cluster's secrets.
func (s NetworkSpec) serveConfig(w http.ResponseWriter, r *http.Request) {
	from, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		http.Error(w, "bad peer address", http.StatusBadRequest)

		return
	}

	for _, n := range s.Nodes {
		if r.URL.Path != ConfigPath(n.Name) {
			continue
		}

		if a := from.Addr().Unmap(); a != n.Address && a != n.Address6 {
			fmt.Fprintf(os.Stderr, "[network] refused %s's config to %s\n", n.Name, from.Addr())
			http.Error(w, "this config is served to its node only", http.StatusForbidden)

			return
		}

		fmt.Fprintf(os.Stderr, "[network] serving %s's config\n", n.Name)
		http.ServeFile(w, r, n.Config)

		return
	}

	http.NotFound(w, r)
}
