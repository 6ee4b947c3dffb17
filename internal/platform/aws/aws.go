// Package aws is the aws platform (Amazon EC2), as upstream's: the node asks the instance
// metadata service (IMDSv2, http://169.254.169.254) for its user data (the machine config), its
// hostname, identity and placement, and its primary network card's addresses.
package aws

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

// The instance metadata service's addresses: IPv4, and IPv6 (Nitro instances; an IPv6-only
// instance reaches it only there).
const (
	Endpoint     = "http://169.254.169.254"
	EndpointIPv6 = "http://[fd00:ec2::254]"
)

// IMDSv2's headers: the token request's lifetime, and the token on every other request.
const (
	TokenTTLHeader = "X-aws-ec2-metadata-token-ttl-seconds" //nolint:gosec // G101: a header's name, not a credential
	TokenHeader    = "X-aws-ec2-metadata-token"             //nolint:gosec // G101: a header's name, not a credential
)

// tokenTTL is the token's lifetime in seconds: IMDSv2's longest (six hours), so that no request
// of a boot whose metadata service answers slowly (Env.Do tries for minutes) finds it expired.
const tokenTTL = "21600"

// AWS is the aws platform; a zero Endpoint or EndpointIPv6 is the instance metadata service's.
type AWS struct {
	Endpoint, EndpointIPv6 string
}

var _ platform.Platform = AWS{}

// Name implements platform.Platform.
func (AWS) Name() string { return platform.AWS }

// client asks the metadata service, with the session token when it gave one.
type client struct {
	env   platform.Env
	base  string
	token string
}

// get is the document at path under /latest/; found is false when the service has none (404).
func (c *client) get(ctx context.Context, path string) (body []byte, found bool, err error) {
	r := platform.Request{URL: c.base + "/latest/" + path}
	if c.token != "" {
		r.Header = header(TokenHeader, c.token)
	}

	body, err = c.env.Do(ctx, r)
	if errors.Is(err, platform.ErrNotFound) {
		return nil, false, nil
	}

	if err != nil {
		return nil, false, fmt.Errorf("aws: the instance metadata service did not answer %s: %w", r.URL, err)
	}

	return body, true, nil
}

// Data implements platform.Platform: it brings the boot's network up (DHCP on every link),
// takes an IMDSv2 session token and reads the user data and the metadata. No user data (404) is
// no config: the node waits in maintenance mode.
func (p AWS) Data(ctx context.Context, env platform.Env) (platform.Data, error) {
	if err := env.NetworkUp(); err != nil {
		return platform.Data{}, err
	}

	c, err := p.connect(ctx, env)
	if err != nil {
		return platform.Data{}, err
	}

	userData, found, err := c.get(ctx, "user-data")
	if err != nil {
		return platform.Data{}, err
	}

	m, err := fetchMetadata(ctx, c)
	if err != nil {
		return platform.Data{}, err
	}

	d, err := Parse(m, c.base+"/latest/meta-data/")
	if err != nil {
		return platform.Data{}, err
	}

	switch {
	case !found:
		env.Log("aws: the instance has no user data (%s/latest/user-data: 404): no machine config, the node waits in maintenance mode", c.base)
	case len(bytes.TrimSpace(userData)) == 0:
		env.Log("aws: the instance's user data is empty: no machine config, the node waits in maintenance mode")
	default:
		d.Config = userData
	}

	env.Log("aws: instance %s (%s) in %s", d.Metadata.InstanceID, d.Metadata.InstanceType, d.Metadata.Zone)

	return d, nil
}

// connect takes an IMDSv2 session token from the metadata service at whichever of its
// addresses answers first, as upstream races its IPv4 and IPv6 endpoints (the SDK falls back
// from neither to the other): an instance may be IPv4-only, IPv6-only or both. The client asks
// that address from then on.
func (p AWS) connect(ctx context.Context, env platform.Env) (*client, error) {
	bases := []string{strings.TrimSuffix(cmp.Or(p.Endpoint, Endpoint), "/"), strings.TrimSuffix(cmp.Or(p.EndpointIPv6, EndpointIPv6), "/")}

	type answer struct {
		base  string
		token []byte
		err   error
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // the slower address's tries

	answers := make(chan answer, len(bases))

	for _, base := range bases {
		go func() {
			token, err := env.Do(ctx, platform.Request{Method: http.MethodPut, URL: base + "/latest/api/token", Header: header(TokenTTLHeader, tokenTTL)})
			answers <- answer{base, token, err}
		}()
	}

	var errs []error

	for range bases {
		a := <-answers
		tokenURL := a.base + "/latest/api/token"

		switch {
		case errors.Is(a.err, platform.ErrNotFound):
			// A service without IMDSv2 (the AWS SDK falls back the same way).
			env.Log("aws: %s is not there: asking the metadata service without a session token (IMDSv1)", tokenURL)

			return &client{env: env, base: a.base}, nil
		case a.err != nil:
			errs = append(errs, fmt.Errorf("PUT %s: %w", tokenURL, a.err))
		default:
			if a.base != bases[0] {
				env.Log("aws: the instance metadata service answers at %s (IPv6), not at %s", a.base, bases[0])
			}

			return &client{env: env, base: a.base, token: strings.TrimSpace(string(a.token))}, nil
		}
	}

	return nil, fmt.Errorf("aws: no IMDSv2 session token from the instance metadata service at either of its addresses: %w", errors.Join(errs...))
}

// fetchMetadata reads the meta-data keys upstream reads; a key the service does not have is
// empty.
func fetchMetadata(ctx context.Context, c *client) (Metadata, error) {
	m := Metadata{Interfaces: map[string]Interface{}}

	for _, k := range []struct {
		path  string
		field *string
	}{
		{"hostname", &m.Hostname}, {"instance-id", &m.InstanceID}, {"instance-type", &m.InstanceType},
		{"instance-life-cycle", &m.InstanceLifeCycle}, {"local-hostname", &m.LocalHostname},
		{"public-hostname", &m.PublicHostname}, {"public-ipv4", &m.PublicIPv4},
		{"placement/region", &m.Region}, {"placement/availability-zone", &m.Zone},
		{"network/interfaces/macs/", &m.MACs}, {"tags/instance", &m.TagKeys},
	} {
		b, _, err := c.get(ctx, "meta-data/"+k.path)
		if err != nil {
			return m, err
		}

		*k.field = strings.TrimSpace(string(b))
	}

	if m.TagKeys != "" {
		m.Tags = map[string]string{}

		for key := range strings.FieldsSeq(m.TagKeys) {
			b, _, err := c.get(ctx, "meta-data/tags/instance/"+key)
			if err != nil {
				return m, err
			}

			m.Tags[key] = strings.TrimSpace(string(b))
		}
	}

	for _, mac := range listLines(m.MACs) {
		mac = strings.TrimSuffix(mac, "/")

		var i Interface

		for _, k := range []struct {
			path  string
			field *string
		}{{"device-number", &i.DeviceNumber}, {"local-ipv4s", &i.LocalIPv4s}, {"ipv6s", &i.IPv6s}} {
			b, _, err := c.get(ctx, "meta-data/network/interfaces/macs/"+mac+"/"+k.path)
			if err != nil {
				return m, err
			}

			*k.field = strings.TrimSpace(string(b))
		}

		m.Interfaces[mac] = i
	}

	return m, nil
}

// header is a request's header; its name canonical, as the server reads it.
func header(name, value string) http.Header {
	h := http.Header{}
	h.Set(name, value)

	return h
}

// listLines are a listing's non-empty lines.
func listLines(s string) []string {
	var lines []string

	for l := range strings.Lines(s) {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}

	return lines
}
