// Package gcp is the gcp platform (Google Compute Engine), as upstream's: the node asks the
// metadata server (http://169.254.169.254/computeMetadata/v1/, metadata.google.internal, with
// Metadata-Flavor: Google) for its user data (the instance attribute user-data: the machine
// config), its hostname, identity and zone, and its network cards.
package gcp

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/talos-go/talos/internal/platform"
)

// Endpoint is the metadata server's address: its IP, so that the node needs no DNS to reach
// it (as Google's client library).
const Endpoint = "http://169.254.169.254"

// The metadata server answers only requests with this header (a guard against requests a
// proxy or a redirect makes for someone else).
const (
	FlavorHeader = "Metadata-Flavor"
	Flavor       = "Google"
)

// Paths under /computeMetadata/v1/ the node reads.
const (
	UserData          = "instance/attributes/user-data"
	ProjectID         = "project/project-id"
	Name              = "instance/name"
	Hostname          = "instance/hostname"
	ID                = "instance/id"
	MachineType       = "instance/machine-type"
	Zone              = "instance/zone"
	Preemptible       = "instance/scheduling/preemptible"
	Tags              = "instance/tags"
	NetworkInterfaces = "instance/network-interfaces/?recursive=true&alt=json"
)

// GCP is the gcp platform; a zero Endpoint is the metadata server's.
type GCP struct {
	Endpoint string
}

var _ platform.Platform = GCP{}

// Name implements platform.Platform.
func (GCP) Name() string { return platform.GCP }

// Data implements platform.Platform: it brings the boot's network up (DHCP on every link) and
// reads the user data and the metadata. No user-data attribute (404), or an empty one, is no
// config: the node waits in maintenance mode.
func (p GCP) Data(ctx context.Context, env platform.Env) (platform.Data, error) {
	if err := env.NetworkUp(); err != nil {
		return platform.Data{}, err
	}

	base := strings.TrimSuffix(cmp.Or(p.Endpoint, Endpoint), "/") + "/computeMetadata/v1/"

	get := func(path string, required bool) (string, error) {
		h := http.Header{}
		h.Set(FlavorHeader, Flavor)

		b, err := env.Do(ctx, platform.Request{URL: base + path, Header: h})
		if errors.Is(err, platform.ErrNotFound) {
			if required {
				return "", fmt.Errorf("gcp: the metadata server has no %s%s (404)", base, path)
			}

			return "", nil
		}

		if err != nil {
			return "", fmt.Errorf("gcp: the metadata server did not answer %s%s: %w", base, path, err)
		}

		return string(b), nil
	}

	userData, err := get(UserData, false)
	if err != nil {
		return platform.Data{}, err
	}

	var m Metadata

	for _, k := range []struct {
		path     string
		field    *string
		required bool
	}{
		{ProjectID, &m.ProjectID, true}, {Name, &m.Name, true}, {Hostname, &m.Hostname, true}, {ID, &m.ID, true},
		{MachineType, &m.MachineType, true}, {Zone, &m.Zone, true}, {Preemptible, &m.Preemptible, false},
		{Tags, &m.Tags, false}, {NetworkInterfaces, &m.NetworkInterfaces, false},
	} {
		if *k.field, err = get(k.path, k.required); err != nil {
			return platform.Data{}, err
		}
	}

	d, err := Parse(m, base)
	if err != nil {
		return platform.Data{}, err
	}

	if len(bytes.TrimSpace([]byte(userData))) == 0 {
		env.Log("gcp: the instance has no user-data attribute (%s%s): no machine config, the node waits in maintenance mode", base, UserData)
	} else {
		d.Config = []byte(userData)
	}

	env.Log("gcp: instance %s (%s) of project %s in %s", m.Name, d.Metadata.InstanceType, m.ProjectID, d.Metadata.Zone)

	return d, nil
}
