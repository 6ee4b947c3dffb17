package k8s

import (
	"bytes"
	stdx509 "crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"slices"
	"time"

	cx509 "github.com/siderolabs/crypto/x509"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/role"

	"github.com/talos-go/talos/internal/pki"
)

// As upstream: a ServiceAccount's certificate lives 6 hours and is renewed with an hour left;
// its talosconfig has one context, "default", whose endpoint is the talos Service's name.
const (
	apiAccessCertTTL   = 6 * time.Hour
	apiAccessRenewLeft = time.Hour
	apiAccessContext   = "default"
	apiAccessEndpoint  = constants.KubernetesTalosAPIServiceName + "." + constants.KubernetesTalosAPIServiceNamespace
)

// The failure reasons a ServiceAccount's status.failureReason carries, as upstream's.
const (
	reasonRolesNotFound       = "Roles not found"
	reasonNamespaceNotAllowed = "Namespace is not allowed: %s"
	reasonRolesNotAllowed     = "Roles not allowed: %v"
	reasonSecretExists        = "Secret already exists and is not managed by controller: %s/%s"
)

// GrantRoles decides what a talos.dev ServiceAccount in namespace asking for requested (found:
// its spec.roles is set) gets under machine.features.kubernetesTalosAPIAccess: the roles its
// certificate carries, sorted, or why it gets none. Every requested role must be allowed; one
// that is not refuses the whole account, so an account never holds less than it asked for.
func GrantRoles(namespace string, requested []string, found bool, allowedNamespaces, allowedRoles []string) ([]string, string) {
	if !found {
		return nil, reasonRolesNotFound
	}

	if !slices.Contains(allowedNamespaces, namespace) {
		return nil, fmt.Sprintf(reasonNamespaceNotAllowed, namespace)
	}

	var refused []string

	for _, r := range requested {
		if !slices.Contains(allowedRoles, r) {
			refused = append(refused, r)
		}
	}

	if len(refused) > 0 {
		return nil, fmt.Sprintf(reasonRolesNotAllowed, refused)
	}

	set, _ := role.Parse(requested) // every role is allowed, so known: the config's are validated

	roles := set.Strings()
	slices.Sort(roles)

	return roles, ""
}

// IssueAPIAccessConfig is the talosconfig a ServiceAccount's Secret holds: a client
// certificate of the OS CA whose organizations are the roles, for talos.default.
func IssueAPIAccessConfig(ca *cx509.PEMEncodedCertificateAndKey, name string, roles []string, now time.Time) ([]byte, error) {
	issuer, err := pki.ParseCA(ca.Crt, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("machine.ca: %w", err)
	}

	cert, err := issuer.Issue(pki.Leaf{
		CommonName:    name,
		Organizations: roles,
		ExtKeyUsages:  []stdx509.ExtKeyUsage{stdx509.ExtKeyUsageClientAuth},
		Lifetime:      apiAccessCertTTL,
	}, now)
	if err != nil {
		return nil, err
	}

	return clientconfig.NewConfig(apiAccessContext, []string{apiAccessEndpoint}, ca.Crt, cert).Bytes()
}

// APIAccessConfigStale says why a Secret's talosconfig must be issued again (empty: it fits):
// another CA, endpoint or roles, or a certificate near its end (or longer-lived than ours,
// which a clock jump back leaves).
func APIAccessConfigStale(data []byte, caCrt []byte, roles []string, now time.Time) string {
	cfg, err := clientconfig.FromBytes(data)
	if err != nil {
		return "unparsable"
	}

	ctx := cfg.Contexts[cfg.Context]
	if ctx == nil {
		return "no context"
	}

	if ca, err := base64.StdEncoding.DecodeString(ctx.CA); err != nil || !bytes.Equal(ca, caCrt) {
		return "CA changed"
	}

	if !slices.Equal(ctx.Endpoints, []string{apiAccessEndpoint}) {
		return "endpoint changed"
	}

	crtPEM, err := base64.StdEncoding.DecodeString(ctx.Crt)
	if err != nil {
		return "unparsable certificate"
	}

	block, _ := pem.Decode(crtPEM)
	if block == nil {
		return "unparsable certificate"
	}

	crt, err := stdx509.ParseCertificate(block.Bytes)
	if err != nil {
		return "unparsable certificate"
	}

	switch {
	case crt.NotAfter.After(now.Add(apiAccessCertTTL + time.Minute)):
		return "certificate outlives its lifetime"
	case crt.NotAfter.Before(now.Add(apiAccessRenewLeft)):
		return "due for renewal"
	}

	orgs := slices.Clone(crt.Subject.Organization)
	slices.Sort(orgs)

	if !slices.Equal(orgs, roles) {
		return "roles changed"
	}

	return ""
}
