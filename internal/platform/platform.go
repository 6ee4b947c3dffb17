// Package platform is upstream's talos.platform=: where a node's first machine config (its
// user data), its network and its metadata come from. The initramfs of a node on its own
// kernel (internal/metal) chooses the platform by name, asks it for its Data, applies the
// network and hands the rest to machined in File, which publishes it (PlatformMetadata, the
// hostname, resolvers and time servers under the machine config's). Each platform is a package
// below this one (nocloud); metal is the initramfs's own path (talos.config=, ip=).
package platform

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
)

// Names of the platforms a node boots on.
const (
	Metal     = "metal"
	Nocloud   = "nocloud"
	AWS       = "aws"
	GCP       = "gcp"
	OpenStack = "openstack"
	Azure     = "azure"
)

// Known are the talos.platform= values a node boots with.
var Known = []string{Metal, Nocloud, OpenStack, Azure, AWS, GCP}

// Check refuses a talos.platform= value that names no platform here, listing those that are.
func Check(name string) error {
	if slices.Contains(Known, name) {
		return nil
	}

	return fmt.Errorf("talos.platform=%q is not a platform this node boots on: give one of %s", name, strings.Join(Known, ", "))
}

// Platform is one source of a node's data.
type Platform interface {
	// Name is the talos.platform= value.
	Name() string
	// Data reads the user data, the network and the metadata from the platform's source. A
	// source that is not there is no error: Data has no config (maintenance mode), and its
	// Network is nil (the boot's own: ip= or DHCP on every link).
	Data(ctx context.Context, env Env) (Data, error)
}

// Env is what a platform uses of the machine while the node boots.
type Env struct {
	// Cmdline is a kernel argument's value ("" when it is not given).
	Cmdline func(key string) string
	// Serial is the SMBIOS system serial number (/sys/class/dmi/id/product_serial).
	Serial string
	// Volume mounts read-only the filesystem with one of labels and returns its folder, its
	// device and its unmount; ErrNoVolume when no device has such a label.
	Volume func(labels ...string) (dir, dev string, unmount func(), err error)
	// Disc mounts read-only, one after another, the discs in the CD-ROM drives (UDF, else ISO
	// 9660: Azure's provisioning disc) and returns the first with file at its root, its device
	// (with the filesystem it was read as, for messages) and its unmount; ErrNoVolume when none
	// has it.
	Disc func(file string) (dir, dev string, unmount func(), err error)
	// NetworkUp brings up the boot's network (ip=, else DHCP on every link), for a source that
	// is reached over it.
	NetworkUp func() error
	// Get downloads a URL, trying again for a while; ErrNotFound when the server answers 404,
	// ErrBadRequest when it answers 400.
	Get func(ctx context.Context, url string) ([]byte, error)
	// Do is Get for any method, headers and body (a cloud's metadata service), with the same
	// tries, ErrNotFound and ErrBadRequest.
	Do func(ctx context.Context, r Request) ([]byte, error)
	// Log writes a line to the console.
	Log func(format string, args ...any)
}

// Request is an HTTP request of Env.Do; an empty Method is GET.
type Request struct {
	Method string
	URL    string
	Header http.Header
	Body   []byte
}

// Errors an Env's functions return.
var (
	ErrNoVolume = errors.New("no volume with the label")
	ErrNotFound = errors.New("not found")
	// ErrBadRequest is the server's 400: an answer (Azure's IMDS to an API version it does not
	// know), not tried again.
	ErrBadRequest = errors.New("bad request")
)

// Data is what a platform gives a node.
type Data struct {
	// Config is the machine config (the user data); nil: none, the node waits in maintenance
	// mode for one.
	Config []byte `json:"-"`
	// Network is the platform's network; nil: the boot's own.
	Network  *Network                     `json:"network,omitempty"`
	Metadata runtime.PlatformMetadataSpec `json:"metadata"`
}

// Network is a platform's network configuration (upstream's PlatformNetworkConfig): the node
// applies it at boot, and the machine config's network comes on top of it.
type Network struct {
	Hostname string `json:"hostname,omitempty"` // may be a FQDN
	// Links are the cards' configurations; none: the boot's own (ip=, else DHCP on every link).
	Links []Link `json:"links,omitempty"`
	// Routes go through no named link: the kernel picks the one that reaches the gateway.
	Routes      []Route      `json:"routes,omitempty"`
	Resolvers   []netip.Addr `json:"resolvers,omitempty"`
	TimeServers []string     `json:"timeServers,omitempty"`
	// ExternalIPs are the node's public addresses that are on none of its links (a cloud's
	// 1:1 NAT, a load balancer's frontend): machined publishes them, as upstream, as addresses
	// of the link "external".
	ExternalIPs []netip.Addr `json:"externalIPs,omitempty"`
}

// Link is one link's configuration: a network card, or a bond or VLAN the node makes.
type Link struct {
	Name string `json:"name,omitempty"` // the kernel's name; empty: the card with MAC
	MAC  string `json:"mac,omitempty"`  // picks the card when set
	// Kind is "" for a card, "bond" or "vlan" for a link the node makes (Name is its name).
	Kind string `json:"kind,omitempty"`
	Bond *Bond  `json:"bond,omitempty"` // Kind bond
	// HardwareAddr is the MAC a bond the node makes is given (upstream's HardwareAddress);
	// empty: the kernel's choice, its first member's.
	HardwareAddr string         `json:"hardwareAddr,omitempty"`
	VLAN         *VLAN          `json:"vlan,omitempty"` // Kind vlan
	MTU          int            `json:"mtu,omitempty"`
	DHCP4        bool           `json:"dhcp4,omitempty"`
	DHCP6        bool           `json:"dhcp6,omitempty"`
	Addresses    []netip.Prefix `json:"addresses,omitempty"`
	Routes       []Route        `json:"routes,omitempty"`
}

// Bond is a bond's members and options (upstream's BondMasterSpec names; empty or zero: the
// kernel's default).
type Bond struct {
	// Members are the cards it bonds, each by the kernel's name or by MAC.
	Members    []string `json:"members"`
	Mode       string   `json:"mode,omitempty"`       // balance-rr, active-backup, 802.3ad...
	MIIMon     uint32   `json:"miimon,omitempty"`     // milliseconds
	HashPolicy string   `json:"hashPolicy,omitempty"` // layer2, layer3+4...
	LACPRate   string   `json:"lacpRate,omitempty"`   // slow, fast
}

// Check refuses a bond without members or with a mode, hash policy or LACP rate the kernel does
// not name; members and fields (of the mode, the hash policy and the LACP rate) are the
// document's names of them, for the message.
func (b *Bond) Check(members string, fields [3]string) error {
	if len(b.Members) == 0 {
		return fmt.Errorf("%s: a bond needs its member links", members)
	}

	for i, o := range []struct {
		value string
		parse func(string) error
	}{
		{b.Mode, func(v string) error { _, err := nethelpers.BondModeByName(v); return err }},
		{b.HashPolicy, func(v string) error { _, err := nethelpers.BondXmitHashPolicyByName(v); return err }},
		{b.LACPRate, func(v string) error { _, err := nethelpers.LACPRateByName(v); return err }},
	} {
		if o.value == "" {
			continue
		}

		if err := o.parse(o.value); err != nil {
			return fmt.Errorf("%s: %q: %w", fields[i], o.value, err)
		}
	}

	return nil
}

// NewVLAN is the VLAN with ID id on parent, refused (by the document's names of the fields)
// without a parent or with an ID outside 1 to 4094.
func NewVLAN(parent string, id int, parentField, idField string) (*VLAN, error) {
	if parent == "" {
		return nil, fmt.Errorf("%s: a VLAN needs its parent link", parentField)
	}

	if id < 1 || id > 4094 {
		return nil, fmt.Errorf("%s: %d is not a VLAN ID: give 1 to 4094", idField, id)
	}

	return &VLAN{Parent: parent, ID: uint16(id)}, nil
}

// VLAN is a VLAN's parent link and ID.
type VLAN struct {
	Parent string `json:"parent"` // the parent link: the kernel's name, or a card's MAC
	ID     uint16 `json:"id"`
}

// Route is a route through a link; a zero To is the default route of Via's family.
type Route struct {
	To     netip.Prefix `json:"to"`
	Via    netip.Addr   `json:"via"`
	Metric uint32       `json:"metric,omitempty"`
}

// HostnameParts are the short name and the domain of the hostname, which may be a FQDN.
func (n *Network) HostnameParts() (host, domain string) {
	if n == nil {
		return "", ""
	}

	host, domain, _ = strings.Cut(n.Hostname, ".")

	return host, domain
}

// Published is what the boot hands machined in File: the platform's metadata and the parts of
// its network machined keeps (the addresses and routes are on the links already).
type Published struct {
	Data
	// DHCPLinks are the links the boot leased addresses on, whose leases machined renews; nil
	// when Network is nil (machined finds them itself, as on metal).
	DHCPLinks []string `json:"dhcpLinks,omitempty"`
}

// File is where the initramfs writes Published, at its root (machined sees the initramfs at
// /system/initramfs).
const File = "/platform.json"

// Write stores p at path for machined.
func Write(path string, p Published) error {
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}

	return os.WriteFile(path, b, 0o600)
}

// Read loads what the boot published; ok is false when it published nothing (a node booted
// before platforms were published, or not by the initramfs).
func Read(path string) (p Published, ok bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return p, false, nil
	}

	if err != nil {
		return p, false, err
	}

	if err = json.Unmarshal(b, &p); err != nil {
		return p, false, fmt.Errorf("%s: %w", path, err)
	}

	return p, true, nil
}
