// Package openstack is the OpenStack platform, as upstream's: meta_data.json, network_data.json
// and user_data (the machine config) come from the config drive (a volume labelled config-2,
// ISO 9660 or FAT, under openstack/latest/), else from the metadata service at
// http://169.254.169.254/openstack/latest/ once the boot's network is up.
package openstack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"

	"github.com/talos-go/talos/internal/platform"
)

// OpenStack is the OpenStack platform.
type OpenStack struct {
	// Endpoint is the metadata service's root URL, ending in a slash; empty: upstream's,
	// http://169.254.169.254/ (tests give their server's).
	Endpoint string
}

var _ platform.Platform = OpenStack{}

// Name implements platform.Platform.
func (OpenStack) Name() string { return platform.OpenStack }

// The documents, under the config drive's root and the metadata service's endpoint.
const (
	MetaData    = "openstack/latest/meta_data.json"
	NetworkData = "openstack/latest/network_data.json"
	UserData    = "openstack/latest/user_data"
	// InstanceType is the EC2-style document upstream asks the metadata service for when
	// meta_data.json names no instance_type.
	InstanceType = "latest/meta-data/instance-type"
	// PublicIPv4 is the EC2-style document of the instance's floating IP, which upstream asks
	// the metadata service for (a config drive has none).
	PublicIPv4 = "latest/meta-data/public-ipv4"
	// Endpoint is the metadata service's root.
	Endpoint = "http://169.254.169.254/"
)

// Labels are the labels of a config drive (FAT keeps labels upper case).
var Labels = []string{"config-2", "CONFIG-2"}

// Documents are a source's files as read; nil: not there.
type Documents struct {
	Source                          string // where they were read, for messages
	MetaData, NetworkData, UserData []byte
	// InstanceType is the metadata service's EC2-style instance-type, for a meta_data.json
	// without instance_type.
	InstanceType string
	// PublicIPv4 is the metadata service's EC2-style public-ipv4 (the floating IP), as served.
	PublicIPv4 string
}

// Data implements platform.Platform: the config drive when it holds user_data, else the
// metadata service (as upstream: a drive without user_data is passed over), after the boot's
// network is up.
func (p OpenStack) Data(ctx context.Context, env platform.Env) (platform.Data, error) {
	docs, err := p.read(ctx, env)
	if err != nil {
		return platform.Data{}, err
	}

	var found []string

	for _, f := range []struct {
		name string
		b    []byte
	}{{MetaData, docs.MetaData}, {NetworkData, docs.NetworkData}, {UserData, docs.UserData}} {
		if f.b == nil {
			env.Log("openstack: %s has no %s", docs.Source, f.name)
		} else {
			found = append(found, filepath.Base(f.name))
		}
	}

	env.Log("openstack: read %s from %s", strings.Join(found, ", "), docs.Source)

	d, err := Parse(docs)
	if err != nil {
		return d, err
	}

	if len(bytes.TrimSpace(docs.UserData)) > 0 && d.Config == nil {
		env.Log("openstack: the user_data of %s is a #cloud-config, not a machine config: the node waits in maintenance mode", docs.Source)
	}

	return d, nil
}

// read finds the documents: the config drive's, else the metadata service's.
func (p OpenStack) read(ctx context.Context, env platform.Env) (Documents, error) {
	dir, dev, unmount, err := env.Volume(Labels...)

	switch {
	case errors.Is(err, platform.ErrNoVolume):
		env.Log("openstack: no config drive (a volume labelled config-2): asking the metadata service")
	case err != nil:
		return Documents{}, err
	default:
		docs, err := readDir(dir, "the config drive "+dev)
		unmount()

		if err != nil || docs.UserData != nil {
			return docs, err
		}

		env.Log("openstack: the config drive %s has no %s: asking the metadata service, as upstream", dev, UserData)
	}

	if err = env.NetworkUp(); err != nil {
		return Documents{}, err
	}

	return p.fetch(ctx, env)
}

// readDir reads the documents of a mounted config drive.
func readDir(dir, source string) (Documents, error) {
	docs := Documents{Source: source}

	for _, f := range []struct {
		name string
		b    *[]byte
	}{{MetaData, &docs.MetaData}, {NetworkData, &docs.NetworkData}, {UserData, &docs.UserData}} {
		b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(f.name)))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}

		if err != nil {
			return docs, fmt.Errorf("openstack: reading %s of %s: %w", f.name, source, err)
		}

		*f.b = b
	}

	return docs, nil
}

// fetch downloads the documents from the metadata service; one it does not have (404) is not
// there. Without an instance_type in meta_data.json, the EC2-style instance-type is asked for,
// and the EC2-style public-ipv4 always, as upstream does; their absence is no error.
func (p OpenStack) fetch(ctx context.Context, env platform.Env) (Documents, error) {
	base := p.Endpoint
	if base == "" {
		base = Endpoint
	}

	docs := Documents{Source: "the metadata service " + base}

	for _, f := range []struct {
		name string
		b    *[]byte
	}{{MetaData, &docs.MetaData}, {NetworkData, &docs.NetworkData}, {UserData, &docs.UserData}} {
		b, err := env.Get(ctx, base+f.name)
		if errors.Is(err, platform.ErrNotFound) {
			continue
		}

		if err != nil {
			return docs, fmt.Errorf("openstack: fetching %s: %w", base+f.name, err)
		}

		env.Log("openstack: fetched %s", base+f.name)

		*f.b = b
	}

	if m, err := ParseMetaData(docs.MetaData); err == nil && m.InstanceType == "" {
		b, err := env.Get(ctx, base+InstanceType)

		switch {
		case err == nil:
			docs.InstanceType = strings.TrimSpace(string(b))
		case !errors.Is(err, platform.ErrNotFound):
			env.Log("openstack: fetching %s: %v (no instance type)", base+InstanceType, err)
		}
	}

	switch b, err := env.Get(ctx, base+PublicIPv4); {
	case err == nil:
		docs.PublicIPv4 = strings.TrimSpace(string(b))
	case !errors.Is(err, platform.ErrNotFound):
		env.Log("openstack: fetching %s: %v (no external IP)", base+PublicIPv4, err)
	}

	return docs, nil
}

// Parse turns a source's documents into the node's data. Errors name the document, its source
// and the field.
func Parse(docs Documents) (platform.Data, error) {
	meta, err := ParseMetaData(docs.MetaData)
	if err != nil {
		return platform.Data{}, fmt.Errorf("openstack: %s of %s: %w", MetaData, docs.Source, err)
	}

	d := platform.Data{Network: &platform.Network{}}

	if docs.NetworkData != nil {
		if d.Network, err = ParseNetworkData(docs.NetworkData); err != nil {
			return platform.Data{}, fmt.Errorf("openstack: %s of %s: %w", NetworkData, docs.Source, err)
		}
	}

	d.Network.Hostname = meta.Hostname

	if docs.PublicIPv4 != "" {
		ip, err := netip.ParseAddr(docs.PublicIPv4)
		if err != nil {
			return platform.Data{}, fmt.Errorf("openstack: %s of %s: %q is not an IP address", PublicIPv4, docs.Source, docs.PublicIPv4)
		}

		d.Network.ExternalIPs = []netip.Addr{ip}
	}

	if meta.InstanceType == "" {
		meta.InstanceType = docs.InstanceType
	}

	// A #cloud-config is cloud-init's (some clouds do not let the user data be changed): as
	// upstream, it is no config.
	if len(bytes.TrimSpace(docs.UserData)) > 0 && !bytes.HasPrefix(docs.UserData, []byte("#cloud-config")) {
		d.Config = docs.UserData
	}

	d.Metadata = runtime.PlatformMetadataSpec{
		Platform: platform.OpenStack, Hostname: meta.Hostname, Zone: meta.AvailabilityZone,
		InstanceID: meta.UUID, InstanceType: meta.InstanceType,
	}

	if meta.UUID != "" {
		d.Metadata.ProviderID = "openstack:///" + meta.UUID
	}

	return d, nil
}
