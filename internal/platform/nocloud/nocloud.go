// Package nocloud is the nocloud platform (Proxmox, libvirt, plain QEMU), as upstream's and
// cloud-init's NoCloud datasource: meta-data, user-data (the machine config) and
// network-config come from a volume labelled cidata or CIDATA (ISO 9660 or FAT), or from the
// URL of a seed, ds=nocloud;s=<url> (or ds=nocloud-net) in the SMBIOS system serial number or
// the kernel's ds= argument.
package nocloud

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"

	"github.com/talos-go/talos/internal/platform"
)

// Nocloud is the nocloud platform.
type Nocloud struct{}

var _ platform.Platform = Nocloud{}

// Name implements platform.Platform.
func (Nocloud) Name() string { return platform.Nocloud }

// The documents of a source, and the labels of its volume.
const (
	MetaData      = "meta-data"
	UserData      = "user-data"
	NetworkConfig = "network-config"
)

// Labels are the labels of a nocloud volume.
var Labels = []string{"cidata", "CIDATA"}

// Documents are a source's files as read; nil: not there.
type Documents struct {
	Source                          string // where they were read, for messages
	MetaData, UserData, NetworkConf []byte
}

// Data implements platform.Platform: the seed's URL when there is one, else the cidata
// volume, else nothing (the boot's own network; no user data, so maintenance mode).
func (p Nocloud) Data(ctx context.Context, env platform.Env) (platform.Data, error) {
	s, err := findSeed(env)
	if err != nil {
		return platform.Data{}, err
	}

	var docs Documents

	switch {
	case s.url != "":
		if err = env.NetworkUp(); err != nil {
			return platform.Data{}, err
		}

		if docs, err = fetch(ctx, env, s.url); err != nil {
			return platform.Data{}, err
		}
	default:
		dir, dev, unmount, err := env.Volume(Labels...)
		if errors.Is(err, platform.ErrNoVolume) {
			env.Log("nocloud: no volume labelled cidata and no ds=nocloud;s=<url> seed (SMBIOS serial or ds= argument): no user data, the node waits in maintenance mode")

			return platform.Data{Metadata: runtime.PlatformMetadataSpec{Platform: p.Name(), Hostname: s.hostname, InstanceID: s.instanceID}}, nil
		}

		if err != nil {
			return platform.Data{}, err
		}

		docs, err = readDir(dir, "the cidata volume "+dev)
		unmount()

		if err != nil {
			return platform.Data{}, err
		}
	}

	var found []string

	for _, f := range []struct {
		name string
		b    []byte
	}{{MetaData, docs.MetaData}, {NetworkConfig, docs.NetworkConf}, {UserData, docs.UserData}} {
		if f.b == nil {
			env.Log("nocloud: %s has no %s", docs.Source, f.name)
		} else {
			found = append(found, f.name)
		}
	}

	env.Log("nocloud: read %s from %s", strings.Join(found, ", "), docs.Source)

	d, err := Parse(docs, s.hostname, s.instanceID)
	if err == nil && docs.UserData != nil && d.Config == nil {
		env.Log("nocloud: the user-data of %s is a #cloud-config, not a machine config: the node waits in maintenance mode", docs.Source)
	}

	return d, err
}

// Parse turns a source's documents into the node's data; hostname and instanceID (the seed's
// h= and i=) win over the meta-data's. Errors name the document, its source and the field.
func Parse(docs Documents, hostname, instanceID string) (platform.Data, error) {
	meta, err := ParseMetadata(docs.MetaData)
	if err != nil {
		return platform.Data{}, fmt.Errorf("nocloud: %s of %s: %w", MetaData, docs.Source, err)
	}

	if hostname != "" {
		meta.LocalHostname = hostname
	}

	if instanceID != "" {
		meta.InstanceID = instanceID
	}

	d := platform.Data{Network: &platform.Network{}}

	if docs.NetworkConf != nil {
		if d.Network, err = ParseNetworkConfig(docs.NetworkConf); err != nil {
			return platform.Data{}, fmt.Errorf("nocloud: %s of %s: %w", NetworkConfig, docs.Source, err)
		}
	}

	d.Network.Hostname = meta.LocalHostname

	// A #cloud-config is cloud-init's, not a machine config: as upstream, it is no config.
	if len(bytes.TrimSpace(docs.UserData)) > 0 && !bytes.HasPrefix(docs.UserData, []byte("#cloud-config")) {
		d.Config = docs.UserData
	}

	host, _ := d.Network.HostnameParts()
	d.Metadata = runtime.PlatformMetadataSpec{
		Platform: platform.Nocloud, Hostname: host, InstanceID: meta.InstanceID, InstanceType: meta.InstanceType,
		ProviderID: meta.ProviderID, Region: meta.Region, Zone: meta.Zone,
	}

	return d, nil
}

// readDir reads the documents of a mounted volume.
func readDir(dir, source string) (Documents, error) {
	docs := Documents{Source: source}

	for _, f := range []struct {
		name string
		b    *[]byte
	}{{MetaData, &docs.MetaData}, {UserData, &docs.UserData}, {NetworkConfig, &docs.NetworkConf}} {
		b, err := os.ReadFile(filepath.Join(dir, f.name))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}

		if err != nil {
			return docs, fmt.Errorf("nocloud: reading %s of %s: %w", f.name, source, err)
		}

		*f.b = b
	}

	return docs, nil
}

// fetch downloads the documents under the seed's URL; one the server does not have is not there.
func fetch(ctx context.Context, env platform.Env, base string) (Documents, error) {
	docs := Documents{Source: base}

	for _, f := range []struct {
		name string
		b    *[]byte
	}{{MetaData, &docs.MetaData}, {NetworkConfig, &docs.NetworkConf}, {UserData, &docs.UserData}} {
		b, err := env.Get(ctx, base+f.name)
		if errors.Is(err, platform.ErrNotFound) {
			continue
		}

		if err != nil {
			return docs, fmt.Errorf("nocloud: fetching %s: %w", base+f.name, err)
		}

		env.Log("nocloud: fetched %s", base+f.name)

		*f.b = b
	}

	return docs, nil
}

// seed is a ds=nocloud[-net];s=<url>;h=<hostname>;i=<instance-id> string.
type seed struct {
	url, hostname, instanceID string
}

// findSeed reads the kernel's ds= argument, else the SMBIOS serial; neither is no seed.
func findSeed(env platform.Env) (seed, error) {
	if ds := env.Cmdline("ds"); ds != "" {
		s, _, err := ParseSeed("ds=" + ds)
		if err != nil {
			return s, fmt.Errorf("the kernel argument ds=%s: %w", ds, err)
		}

		return s, nil
	}

	s, ok, err := ParseSeed(env.Serial)
	if err != nil {
		return s, fmt.Errorf("the SMBIOS system serial %q: %w", env.Serial, err)
	}

	if ok && s.url != "" {
		env.Log("nocloud: seed %s from the SMBIOS system serial", s.url)
	}

	return s, nil
}

// ParseSeed reads a seed string; ok is false when it is not one (a serial number such as
// QEMU's empty one). The URL, when given, ends in a slash: the documents are under it.
func ParseSeed(v string) (s seed, ok bool, err error) {
	fields := strings.Split(strings.TrimSpace(v), ";")
	if fields[0] != "ds=nocloud" && fields[0] != "ds=nocloud-net" {
		return s, false, nil
	}

	for _, f := range fields[1:] {
		k, val, _ := strings.Cut(f, "=")

		switch k {
		case "s", "seedfrom":
			u, err := url.Parse(val)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return s, true, fmt.Errorf("%s=%s: not an http(s) URL: give the URL meta-data, user-data and network-config are served under", k, val)
			}

			s.url = strings.TrimSuffix(val, "/") + "/"
		case "h", "local-hostname":
			s.hostname = val
		case "i", "instance-id":
			s.instanceID = val
		}
	}

	return s, true, nil
}
