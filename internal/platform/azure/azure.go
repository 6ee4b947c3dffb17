// Package azure is the Azure platform, as upstream's: the machine config is the VM's custom
// data, in ovf-env.xml on the provisioning disc in the VM's CD-ROM drive; the hostname, the
// network and the instance's metadata come from the Instance Metadata Service (IMDS,
// 169.254.169.254, which answers requests with the header Metadata: true); and the node tells
// the wire server (168.63.129.16) that it is Ready, as the Azure Linux agent does, so that Azure
// counts the VM as provisioned.
package azure

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/talos-go/talos/internal/platform"
)

// The services' addresses, the IMDS API version upstream asks for, and the older one it asks
// for when IMDS answers 400 to that (Azure Stack Hub's IMDS knows only older versions).
const (
	IMDS               = "http://169.254.169.254"
	WireServer         = "http://168.63.129.16"
	APIVersion         = "2021-12-13"
	APIVersionFallback = "2019-06-01"
)

// reportFor bounds the health report: a VM the wire server does not answer boots on, later.
const reportFor = time.Minute

// Azure is the Azure platform. IMDS and WireServer are the services' base URLs; empty:
// Azure's (the tests name their own servers).
type Azure struct {
	IMDS, WireServer string
}

var _ platform.Platform = Azure{}

// Name implements platform.Platform.
func (Azure) Name() string { return platform.Azure }

// Data implements platform.Platform: the custom data from the provisioning disc (none: the
// node waits in maintenance mode), then, over the boot's DHCP network, the Ready report to the
// wire server (a failed one is logged: upstream's is best effort too) and IMDS's documents.
func (p Azure) Data(ctx context.Context, env platform.Env) (platform.Data, error) {
	config, err := customData(env)
	if err != nil {
		return platform.Data{}, err
	}

	if err = env.NetworkUp(); err != nil {
		return platform.Data{}, err
	}

	wire := cmp.Or(p.WireServer, WireServer)

	rctx, cancel := context.WithTimeout(ctx, reportFor)
	err = ReportReady(rctx, env, wire)

	cancel()

	if err != nil {
		env.Log("azure: reporting Ready to the wire server %s: %v: Azure may count the VM as still provisioning", wire, err)
	} else {
		env.Log("azure: reported Ready to the wire server %s", wire)
	}

	d, err := p.metadata(ctx, env)
	if err != nil {
		return platform.Data{}, err
	}

	d.Config = config

	return d, nil
}

// metadata reads IMDS's compute and network documents (each required) and its load balancer's
// (optional: a VM behind none has a 404 or an empty answer). An IMDS that answers 400 to the
// compute document at APIVersion is asked all three at APIVersionFallback, as upstream.
func (p Azure) metadata(ctx context.Context, env platform.Env) (platform.Data, error) {
	base, version := cmp.Or(p.IMDS, IMDS), APIVersion
	get := func(path string) (string, []byte, error) {
		url := base + path + "?api-version=" + version + "&format=json"
		b, err := env.Do(ctx, platform.Request{URL: url, Header: http.Header{"Metadata": {"true"}}})

		return url, b, err
	}

	url, b, err := get("/metadata/instance/compute")
	if errors.Is(err, platform.ErrBadRequest) {
		env.Log("azure: IMDS refused API version %s (%v): asking with %s", version, err, APIVersionFallback)

		version = APIVersionFallback
		url, b, err = get("/metadata/instance/compute")
	}

	if err != nil {
		return platform.Data{}, fmt.Errorf("azure: fetching the VM's compute metadata from IMDS: %w", err)
	}

	compute, err := ParseCompute(b)
	if err != nil {
		return platform.Data{}, fmt.Errorf("azure: %s: %w", url, err)
	}

	meta, err := Metadata(compute)
	if err != nil {
		return platform.Data{}, fmt.Errorf("azure: %s: %w", url, err)
	}

	if url, b, err = get("/metadata/instance/network/interface"); err != nil {
		return platform.Data{}, fmt.Errorf("azure: fetching the VM's network interfaces from IMDS: %w", err)
	}

	ifaces, err := ParseInterfaces(b)
	if err != nil {
		return platform.Data{}, fmt.Errorf("azure: %s: %w", url, err)
	}

	network, public := Network(compute, ifaces)

	url, b, err = get("/metadata/loadbalancer")

	switch {
	case errors.Is(err, platform.ErrNotFound) || (err == nil && len(b) == 0):
	case err != nil:
		env.Log("azure: fetching the load balancer's metadata from IMDS: %v", err)
	default:
		lb, err := ParseLoadBalancer(b)
		if err != nil {
			return platform.Data{}, fmt.Errorf("azure: %s: %w", url, err)
		}

		public = append(public, lb...)
	}

	if len(public) > 0 {
		env.Log("azure: public addresses %v", public)

		network.ExternalIPs = public
	}

	env.Log("azure: %s (%s) in %s %s, instance %s", meta.Hostname, meta.InstanceType, meta.Region, meta.Zone, meta.InstanceID)

	return platform.Data{Network: network, Metadata: meta}, nil
}

// customData reads the custom data from ovf-env.xml on the provisioning disc.
func customData(env platform.Env) ([]byte, error) {
	dir, dev, unmount, err := env.Disc(OVFEnv)
	if errors.Is(err, platform.ErrNoVolume) {
		env.Log("azure: no disc with %s in a CD-ROM drive: no custom data, the node waits in maintenance mode", OVFEnv)

		return nil, nil
	}

	if err != nil {
		return nil, fmt.Errorf("azure: looking for the provisioning disc: %w", err)
	}

	b, err := os.ReadFile(filepath.Join(dir, OVFEnv))

	unmount()

	if err != nil {
		return nil, fmt.Errorf("azure: reading %s of the disc %s: %w", OVFEnv, dev, err)
	}

	config, err := ParseOVFEnv(b)
	if err != nil {
		return nil, fmt.Errorf("azure: %s of the disc %s: %w", OVFEnv, dev, err)
	}

	if config == nil {
		env.Log("azure: %s of the disc %s has no custom data: the node waits in maintenance mode", OVFEnv, dev)
	} else {
		env.Log("azure: read the custom data from %s of the disc %s", OVFEnv, dev)
	}

	return config, nil
}
