package secrets

import (
	"bytes"
	stdx509 "crypto/x509"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"time"

	"github.com/siderolabs/crypto/x509"
	talosconfig "github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"

	"github.com/talos-go/talos/internal/pki"
)

// renewFraction: a certificate is renewed once this much of its lifetime has passed.
const renewNum, renewDen = 2, 3

// checkInterval is how often certificates are checked against the wall clock, which catches
// both their renewal time and large clock jumps (timers run on the monotonic clock).
func checkInterval(lifetime time.Duration) time.Duration {
	return min(max(lifetime/20, 50*time.Millisecond), time.Minute)
}

// want is what one certificate must be.
type want struct {
	commonName string
	orgs       []string
	ips        []netip.Addr
	dns        []string
	usage      stdx509.ExtKeyUsage
}

// leaf is the certificate pki issues for w.
func (w want) leaf(lifetime time.Duration) pki.Leaf {
	ips := make([]net.IP, 0, len(w.ips))
	for _, ip := range w.ips {
		ips = append(ips, ip.AsSlice())
	}

	return pki.Leaf{
		CommonName:    w.commonName,
		Organizations: w.orgs,
		IPs:           ips,
		DNSNames:      w.dns,
		ExtKeyUsages:  []stdx509.ExtKeyUsage{w.usage},
		Lifetime:      lifetime,
	}
}

// signLocal issues the certificate with the CA's key (control planes).
func signLocal(ca *x509.PEMEncodedCertificateAndKey, w want, lifetime time.Duration, now time.Time) (*x509.PEMEncodedCertificateAndKey, error) {
	issuer, err := pki.ParseCA(ca.Crt, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("machine.ca: %w", err)
	}

	return issuer.Issue(w.leaf(lifetime), now)
}

func parseCert(data []byte) (*stdx509.Certificate, error) {
	return (&x509.PEMEncodedCertificate{Crt: data}).GetCert()
}

// current reports why a certificate no longer fits (empty: it fits): a different issuer or
// names, or the wall clock past its renewal time or before its start (a clock jump).
func current(pair *x509.PEMEncodedCertificateAndKey, caPEM []byte, w want, now time.Time) string {
	if pair == nil || len(pair.Crt) == 0 || len(pair.Key) == 0 {
		return "missing"
	}

	crt, err := parseCert(pair.Crt)
	if err != nil {
		return "unparsable"
	}

	ca, err := parseCert(caPEM)
	if err != nil || crt.CheckSignatureFrom(ca) != nil {
		return "issuer changed"
	}

	gotIPs := make([]netip.Addr, 0, len(crt.IPAddresses))
	for _, ip := range crt.IPAddresses {
		a, _ := netip.AddrFromSlice(ip)
		gotIPs = append(gotIPs, a.Unmap())
	}

	wantIPs := make([]netip.Addr, 0, len(w.ips))
	for _, ip := range w.ips {
		wantIPs = append(wantIPs, ip.Unmap())
	}

	slices.SortFunc(gotIPs, netip.Addr.Compare)
	slices.SortFunc(wantIPs, netip.Addr.Compare)

	if !slices.Equal(gotIPs, wantIPs) || !slices.Equal(sorted(crt.DNSNames), sorted(w.dns)) {
		return "names changed"
	}

	if crt.Subject.CommonName != w.commonName || !slices.Equal(crt.Subject.Organization, w.orgs) {
		return "subject changed"
	}

	if now.Before(crt.NotBefore) {
		return "clock is before the certificate's start"
	}

	total := crt.NotAfter.Sub(crt.NotBefore)
	if !now.Before(crt.NotBefore.Add(total * renewNum / renewDen)) {
		return "due for renewal"
	}

	return ""
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)

	return slices.Compact(s)
}

// caBundle is the CAs trusted by the node's API: the issuing CA, then the accepted ones.
func caBundle(root *secrets.OSRootSpec) []*x509.PEMEncodedCertificate {
	out := []*x509.PEMEncodedCertificate{{Crt: root.IssuingCA.Crt}}

	for _, acc := range root.AcceptedCAs {
		if !bytes.Equal(acc.Crt, root.IssuingCA.Crt) {
			out = append(out, acc)
		}
	}

	return out
}

func sameBundle(a, b []*x509.PEMEncodedCertificate) bool {
	return slices.EqualFunc(a, b, func(x, y *x509.PEMEncodedCertificate) bool { return bytes.Equal(x.Crt, y.Crt) })
}

// TrustdEndpoints are where a worker finds trustd first: the control-plane endpoint's host
// (the API controller adds the control planes found by discovery).
func TrustdEndpoints(cfg talosconfig.Config) []string {
	if cfg == nil || cfg.Cluster() == nil {
		return nil
	}

	return endpointHosts(cfg.Cluster().Endpoint())
}

func endpointHosts(u *url.URL) []string {
	if u == nil || u.Hostname() == "" {
		return nil
	}

	return []string{u.Hostname()}
}

// hasKey reports whether the node holds the CA key (a control plane).
func hasKey(root *secrets.OSRootSpec) bool {
	return root.IssuingCA != nil && len(root.IssuingCA.Crt) > 0 && len(root.IssuingCA.Key) > 0
}
