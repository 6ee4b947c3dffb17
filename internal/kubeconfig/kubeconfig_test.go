package kubeconfig_test

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/talos-go/talos/internal/kubeconfig"
)

// TestSingleRoundTrip: what Single writes, kubectl's loader reads back whole, with the
// certificates as base64 strings (the form kubectl accepts) and the context current.
func TestSingleRoundTrip(t *testing.T) {
	ca, crt := []byte("-----BEGIN CERTIFICATE-----\nca\n"), []byte("crt")

	out, err := kubeconfig.Single{
		ClusterName: "c",
		Cluster:     clientcmdapi.Cluster{Server: "https://k8s:6443", CertificateAuthorityData: ca},
		UserName:    "admin@c",
		User:        clientcmdapi.AuthInfo{ClientCertificateData: crt, ClientKeyData: []byte("key")},
		ContextName: "admin@c",
		Namespace:   "default",
	}.Encode()
	if err != nil {
		t.Fatal(err)
	}

	if !strings.Contains(string(out), "certificate-authority-data: "+base64.StdEncoding.EncodeToString(ca)) {
		t.Errorf("CA not base64 in:\n%s", out)
	}

	kc, err := clientcmd.Load(out)
	if err != nil {
		t.Fatal(err)
	}

	ctx := kc.Contexts[kc.CurrentContext]
	if kc.CurrentContext != "admin@c" || ctx == nil || ctx.Cluster != "c" || ctx.AuthInfo != "admin@c" || ctx.Namespace != "default" {
		t.Fatalf("context %q: %+v", kc.CurrentContext, ctx)
	}

	if c := kc.Clusters["c"]; c == nil || c.Server != "https://k8s:6443" || !bytes.Equal(c.CertificateAuthorityData, ca) {
		t.Errorf("cluster: %+v", c)
	}

	if u := kc.AuthInfos["admin@c"]; u == nil || !bytes.Equal(u.ClientCertificateData, crt) || string(u.ClientKeyData) != "key" {
		t.Errorf("user: %+v", u)
	}
}
