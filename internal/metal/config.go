package metal

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/talos-go/talos/internal/platform"
)

// Fetching talos.config: each try is bounded, and the tries go on, a little further apart each
// time, for configFetchFor; then the boot stops with the last error.
const (
	configFetchFor = 3 * time.Minute
	configTryFor   = 30 * time.Second
	configMaxSize  = 16 << 20
)

// ConfigVars are the values talos.config's URL may hold, as upstream's: ${uuid} and ${serial}
// (the machine's, from its firmware), ${mac} (the node's link's) and ${hostname}.
func ConfigVars(address netip.Addr, hostname string) map[string]string {
	vars := map[string]string{"hostname": hostname}

	for key, file := range map[string]string{"uuid": "product_uuid", "serial": "product_serial"} {
		if b, err := os.ReadFile("/sys/class/dmi/id/" + file); err == nil {
			vars[key] = strings.TrimSpace(string(b))
		}
	}

	if ifaces, err := net.Interfaces(); err == nil {
		for _, iface := range ifaces {
			addrs, _ := iface.Addrs()
			for _, a := range addrs {
				if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr() == address {
					vars["mac"] = iface.HardwareAddr.String()
				}
			}
		}
	}

	return vars
}

// ConfigURL is talos.config's URL with its ${...} variables replaced. Only http and https are
// sources here; upstream's metal-iso (a config on a labeled volume) is not supported yet.
func ConfigURL(arg string, vars map[string]string) (string, error) {
	if arg == "metal-iso" {
		return "", fmt.Errorf("talos.config=metal-iso: a config from a volume is not supported yet: serve it over http(s) and name its URL")
	}

	expanded := os.Expand(arg, func(key string) string {
		if v, ok := vars[key]; ok {
			return url.QueryEscape(v)
		}

		return "${" + key + "}"
	})

	if i := strings.Index(expanded, "${"); i >= 0 {
		return "", fmt.Errorf("talos.config=%s: %s is unknown or has no value here (known: ${uuid}, ${serial}, ${mac}, ${hostname})", arg, expanded[i:strings.IndexByte(expanded[i:], '}')+i+1])
	}

	u, err := url.Parse(expanded)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("talos.config=%s: not an http(s) URL: give the URL the machine config is served at", arg)
	}

	return expanded, nil
}

// FetchConfig downloads the machine config at rawURL into dst, retrying for a while: the
// server may come up after the machine.
func FetchConfig(ctx context.Context, rawURL, dst string) error {
	body, err := download(ctx, "talos.config", rawURL, false)
	if err != nil {
		return err
	}

	return os.WriteFile(dst, body, 0o600)
}

// download GETs rawURL, trying again for configFetchFor; what names the download in the
// console's lines. With notFoundFinal, a 404 is an answer (platform.ErrNotFound), not tried
// again: a platform's optional document; so is a 400 (platform.ErrBadRequest: Azure's IMDS
// refusing an API version).
func download(ctx context.Context, what, rawURL string, notFoundFinal bool) ([]byte, error) {
	return request(ctx, what, platform.Request{Method: http.MethodGet, URL: rawURL}, notFoundFinal)
}

// request is download for any method, headers and body (a cloud's metadata service: IMDSv2's
// token is a PUT with a header, GCP's answers only with Metadata-Flavor: Google).
func request(ctx context.Context, what string, r platform.Request, notFoundFinal bool) ([]byte, error) {
	rawURL := r.URL

	ctx, cancel := context.WithTimeout(ctx, configFetchFor)
	defer cancel()

	wait := time.Second

	for {
		body, err := fetchOnce(ctx, r)
		if err == nil || (notFoundFinal && (errors.Is(err, platform.ErrNotFound) || errors.Is(err, platform.ErrBadRequest))) {
			return body, err
		}

		log("%s: %v; trying again in %s", what, err, wait)

		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%s=%s: nothing after %s: %w", what, rawURL, configFetchFor, err)
		case <-time.After(wait):
		}

		wait = min(2*wait, 10*time.Second)
	}
}

func fetchOnce(ctx context.Context, r platform.Request) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, configTryFor)
	defer cancel()

	method, rawURL := cmp.Or(r.Method, http.MethodGet), r.URL

	req, err := http.NewRequestWithContext(ctx, method, rawURL, bytes.NewReader(r.Body))
	if err != nil {
		return nil, err
	}

	for k, v := range r.Header {
		req.Header[k] = v
	}

	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()

	if resp.StatusCode == http.StatusNotFound {
		return nil, fmt.Errorf("%s %s: %s: %w", method, rawURL, resp.Status, platform.ErrNotFound)
	}

	if resp.StatusCode == http.StatusBadRequest {
		return nil, fmt.Errorf("%s %s: %s: %w", method, rawURL, resp.Status, platform.ErrBadRequest)
	}

	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s %s: %s", method, rawURL, resp.Status)
	}

	body, err := io.ReadAll(io.LimitReader(resp.Body, configMaxSize+1))
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, rawURL, err)
	}

	if len(body) > configMaxSize {
		return nil, fmt.Errorf("%s %s: larger than %d MiB: not a machine config", method, rawURL, configMaxSize>>20)
	}

	return body, nil
}
