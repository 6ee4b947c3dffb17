package secrets

import (
	"fmt"

	"github.com/siderolabs/crypto/x509"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/talos-go/talos/internal/kubeconfig"
)

// Kubeconfig renders a kubeconfig with one cluster, one user and one context "<user>@<cluster>",
// as upstream names them.
func Kubeconfig(cluster, user, server string, caPEM []byte, pair *x509.PEMEncodedCertificateAndKey) (string, error) {
	ctxName := user + "@" + cluster

	out, err := kubeconfig.Single{
		ClusterName: cluster,
		Cluster:     clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM},
		UserName:    ctxName,
		User:        clientcmdapi.AuthInfo{ClientCertificateData: pair.Crt, ClientKeyData: pair.Key},
		ContextName: ctxName,
	}.Encode()

	return string(out), err
}

// parseKubeconfig reads back what Kubeconfig wrote: the server, the CA and the client pair.
func parseKubeconfig(data string) (server string, caPEM []byte, pair *x509.PEMEncodedCertificateAndKey, err error) {
	kc, err := clientcmd.Load([]byte(data))
	if err != nil {
		return "", nil, nil, err
	}

	if len(kc.Clusters) != 1 || len(kc.AuthInfos) != 1 {
		return "", nil, nil, fmt.Errorf("kubeconfig has %d clusters and %d users, want one each", len(kc.Clusters), len(kc.AuthInfos))
	}

	for _, c := range kc.Clusters {
		server, caPEM = c.Server, c.CertificateAuthorityData
	}

	for _, u := range kc.AuthInfos {
		pair = &x509.PEMEncodedCertificateAndKey{Crt: u.ClientCertificateData, Key: u.ClientKeyData}
	}

	return server, caPEM, pair, nil
}
