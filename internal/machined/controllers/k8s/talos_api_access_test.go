package k8s_test

import (
	"crypto/tls"
	stdx509 "crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"testing"
	"time"

	cx509 "github.com/siderolabs/crypto/x509"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/role"

	"github.com/talos-go/talos/internal/machined/controllers/k8s"
)

func TestGrantRoles(t *testing.T) {
	t.Parallel()

	allowedNS := []string{"kube-system", "tools"}
	allowedRoles := []string{"os:reader", "os:etcd:backup"}

	for _, tc := range []struct {
		name      string
		ns        string
		requested []string
		found     bool
		roles     []string
		reason    string
	}{
		{name: "allowed", ns: "kube-system", requested: []string{"os:reader"}, found: true, roles: []string{"os:reader"}},
		{name: "sorted and deduplicated", ns: "tools", requested: []string{"os:reader", "os:etcd:backup", "os:reader"}, found: true,
			roles: []string{"os:etcd:backup", "os:reader"}},
		{name: "one role not allowed refuses all", ns: "kube-system", requested: []string{"os:reader", "os:admin"}, found: true,
			reason: "Roles not allowed: [os:admin]"},
		{name: "unknown role", ns: "kube-system", requested: []string{"os:root"}, found: true, reason: "Roles not allowed: [os:root]"},
		{name: "namespace not allowed", ns: "default", requested: []string{"os:reader"}, found: true, reason: "Namespace is not allowed: default"},
		{name: "no roles field", ns: "kube-system", found: false, reason: "Roles not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			roles, reason := k8s.GrantRoles(tc.ns, tc.requested, tc.found, allowedNS, allowedRoles)
			if reason != tc.reason || !equal(roles, tc.roles) {
				t.Fatalf("GrantRoles(%s, %v) = %v, %q; want %v, %q", tc.ns, tc.requested, roles, reason, tc.roles, tc.reason)
			}
		})
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}

	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}

	return true
}

// TestIssueAPIAccessConfig checks the Secret's talosconfig: context default, endpoint
// talos.default, the OS CA, a client certificate of that CA whose organizations are the roles
// (what apid reads the role from), and when it is issued again.
func TestIssueAPIAccessConfig(t *testing.T) {
	t.Parallel()

	gen, err := cx509.NewSelfSignedCertificateAuthority(cx509.ECDSA(true))
	if err != nil {
		t.Fatal(err)
	}

	ca := &cx509.PEMEncodedCertificateAndKey{Crt: gen.CrtPEM, Key: gen.KeyPEM}
	now := time.Now()
	roles := []string{"os:reader"}

	data, err := k8s.IssueAPIAccessConfig(ca, "reader", roles, now)
	if err != nil {
		t.Fatal(err)
	}

	cfg, err := clientconfig.FromBytes(data)
	if err != nil {
		t.Fatal(err)
	}

	ctx := cfg.Contexts[cfg.Context]
	if cfg.Context != "default" || ctx == nil || !equal(ctx.Endpoints, []string{"talos.default"}) {
		t.Fatalf("context %q %+v, want default with endpoint talos.default", cfg.Context, ctx)
	}

	crtPEM, _ := base64.StdEncoding.DecodeString(ctx.Crt)
	keyPEM, _ := base64.StdEncoding.DecodeString(ctx.Key)

	if _, err = tls.X509KeyPair(crtPEM, keyPEM); err != nil {
		t.Fatalf("certificate and key do not pair: %v", err)
	}

	block, _ := pem.Decode(crtPEM)

	crt, err := stdx509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}

	pool := stdx509.NewCertPool()
	pool.AppendCertsFromPEM(gen.CrtPEM)

	if _, err = crt.Verify(stdx509.VerifyOptions{Roots: pool, KeyUsages: []stdx509.ExtKeyUsage{stdx509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("not a client certificate of the OS CA: %v", err)
	}

	if set, unknown := role.Parse(crt.Subject.Organization); len(unknown) > 0 || !set.Includes(role.Reader) || set.Includes(role.Admin) {
		t.Fatalf("organizations %v, want os:reader only", crt.Subject.Organization)
	}

	if life := crt.NotAfter.Sub(now); life < 5*time.Hour || life > 7*time.Hour {
		t.Fatalf("lifetime %s, want 6h as upstream", life)
	}

	if why := k8s.APIAccessConfigStale(data, gen.CrtPEM, roles, now); why != "" {
		t.Fatalf("fresh config stale: %s", why)
	}

	other, err := cx509.NewSelfSignedCertificateAuthority(cx509.ECDSA(true))
	if err != nil {
		t.Fatal(err)
	}

	for want, stale := range map[string]string{
		"roles changed":   k8s.APIAccessConfigStale(data, gen.CrtPEM, []string{"os:etcd:backup"}, now),
		"CA changed":      k8s.APIAccessConfigStale(data, other.CrtPEM, roles, now),
		"due for renewal": k8s.APIAccessConfigStale(data, gen.CrtPEM, roles, now.Add(5*time.Hour+30*time.Minute)),
		"unparsable":      k8s.APIAccessConfigStale([]byte("{"), gen.CrtPEM, roles, now),
	} {
		if stale != want {
			t.Errorf("stale = %q, want %q", stale, want)
		}
	}
}
