package container

// TrustedRootsConfig: the extra roots join the node's trust bundle, which its TLS clients use.
// Named to run before cluster_test.go, whose tests reset and destroy the worker.

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	cx509 "github.com/siderolabs/crypto/x509"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/talos-go/talos/internal/pki"
	"github.com/talos-go/talos/internal/testenv"
)

// trustHost is the suite's address on the cluster bridge, where the nodes reach it.
const trustHost = "10.5.0.1"

// servePrivateCA serves a manifest over https with a certificate of a CA of its own, which no
// system bundle holds; it returns the CA (PEM) and the manifest's URL.
func servePrivateCA(t *testing.T) (string, string) {
	t.Helper()

	ca, err := cx509.NewSelfSignedCertificateAuthority(cx509.ECDSA(true), cx509.NotAfter(time.Now().Add(24*time.Hour)),
		cx509.Organization("e2e private CA"))
	if err != nil {
		t.Fatal(err)
	}

	signer, err := pki.ParseCA(ca.CrtPEM, ca.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}

	leaf, err := signer.Issue(pki.Leaf{CommonName: "e2e manifests", IPs: []net.IP{net.ParseIP(trustHost)},
		ExtKeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, Lifetime: time.Hour}, time.Now())
	if err != nil {
		t.Fatal(err)
	}

	cert, err := tls.X509KeyPair(leaf.Crt, leaf.Key)
	if err != nil {
		t.Fatal(err)
	}

	ln, err := tls.Listen("tcp", trustHost+":0", &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}

	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/trusted.yaml" {
			http.NotFound(w, r)

			return
		}

		w.Write([]byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: from-trusted-roots\n  namespace: default\ndata:\n  ca: private\n"))
	})}

	go srv.Serve(ln)

	t.Cleanup(func() { srv.Close() })

	return string(ca.CrtPEM), "https://" + ln.Addr().String() + "/trusted.yaml"
}

// rootsDoc is a TrustedRootsConfig document named name with certs.
func rootsDoc(name, certs string) string {
	return fmt.Sprintf("apiVersion: v1alpha1\nkind: TrustedRootsConfig\nname: %s\ncertificates: |\n  %s\n",
		name, strings.ReplaceAll(strings.TrimSpace(certs), "\n", "\n  "))
}

// TestTrustedRootsConfigTrustsPrivateCA: a control plane fetches a cluster.extraManifests URL
// served with a private CA's certificate only once a TrustedRootsConfig adds that CA: before,
// the fetch fails as an unknown authority; after, the manifest is applied and the node's
// /etc/ssl/certs/ca-certificates.crt (containerd's and every program's) holds the CA after the
// system's roots. A TrustedRootsConfig that is not PEM is refused naming the document.
func TestTrustedRootsConfigTrustsPrivateCA(t *testing.T) {
	caPEM, url := servePrivateCA(t)
	cs, _ := kube(t)

	_, errOut, code := talosctl(t, "-n", cp, "patch", "machineconfig", "--mode", "no-reboot", "-p", rootsDoc("e2e-bad", "not a certificate"))
	if code == 0 || !strings.Contains(errOut, `TrustedRootsConfig "e2e-bad": certificates: no PEM certificate found`) ||
		!strings.Contains(errOut, "-----BEGIN CERTIFICATE-----") {
		t.Fatalf("a TrustedRootsConfig without a certificate: exit %d, %s", code, errOut)
	}

	must(t, "-n", cp, "patch", "machineconfig", "--mode", "no-reboot", "-p",
		fmt.Sprintf(`[{"op":"add","path":"/cluster/extraManifests/-","value":%q}]`, url))

	t.Cleanup(func() {
		for _, p := range []string{
			"apiVersion: v1alpha1\nkind: TrustedRootsConfig\nname: e2e-ca\n$patch: delete\n",
			`[{"op":"remove","path":"/cluster/extraManifests/1"}]`,
		} {
			if _, errOut, code := talosctl(t, "-n", cp, "patch", "machineconfig", "--mode", "no-reboot", "-p", p); code != 0 {
				t.Logf("cleanup patch %s: %s", p, errOut)
			}
		}
	})

	testenv.WaitFor(t, "machined refusing the private CA's server", 90*time.Second, func() error {
		out := must(t, "-n", cp, "logs", "machined")
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, url) && strings.Contains(line, "certificate signed by unknown authority") {
				return nil
			}
		}

		return fmt.Errorf("no fetch of %s refused as an unknown authority in machined's log yet", url)
	})

	if _, err := cs.CoreV1().ConfigMaps("default").Get(t.Context(), "from-trusted-roots", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the manifest of an untrusted server: %v, want not found", err)
	}

	must(t, "-n", cp, "patch", "machineconfig", "--mode", "no-reboot", "-p", rootsDoc("e2e-ca", caPEM))

	testenv.WaitFor(t, "the manifest from the private CA's server", 2*time.Minute, func() error {
		cm, err := cs.CoreV1().ConfigMaps("default").Get(t.Context(), "from-trusted-roots", metav1.GetOptions{})
		if err != nil {
			return err
		}

		if cm.Data["ca"] != "private" {
			return fmt.Errorf("data %v", cm.Data)
		}

		return nil
	})

	bundle := must(t, "-n", cp, "read", "/etc/ssl/certs/ca-certificates.crt")
	i := strings.Index(bundle, strings.TrimSpace(caPEM))

	if i < 0 || !strings.Contains(bundle, "e2e-ca:\n") {
		t.Fatalf("the node's CA bundle does not hold the TrustedRootsConfig's CA (%d bytes)", len(bundle))
	}

	if n := strings.Count(bundle[:i], "BEGIN CERTIFICATE"); n < 50 {
		t.Errorf("%d certificates before the extra root: the system's roots are gone", n)
	}

	if strings.Contains(must(t, "-n", w, "read", "/etc/ssl/certs/ca-certificates.crt"), strings.TrimSpace(caPEM)) {
		t.Error("the worker, whose config has no TrustedRootsConfig, trusts the CA")
	}
}
