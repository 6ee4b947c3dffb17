package secrets

import (
	"context"
	stdx509 "crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"go.uber.org/zap"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/talos-go/talos/internal/kubeconfig"
	"github.com/talos-go/talos/internal/pki"
)

// Kubelet's client certificate files in its certificate folder, as kubelet's own certificate
// store names them: the current pair is a symlink to a dated file (kubelet rotates it by
// writing a new file and moving the link).
const (
	KubeletClientCurrent = "kubelet-client-current.pem"
	kubeletClientIssued  = "kubelet-client-machined.pem"
	kubeletKubeconfig    = "kubeconfig-kubelet"
)

// kubeletClientLifetime is the control plane kubelet's first certificate's; kubelet renews it
// itself with a certificate request long before.
const kubeletClientLifetime = 365 * 24 * time.Hour

// writeKubeletClient gives a control plane's kubelet its client certificate and kubeconfig,
// signed with the cluster CA the control plane holds, as kubeadm does for control planes: the
// kubelet starts before the API server it runs, so a bootstrap request would fail, back off and
// join tens of seconds after the API server is up. Workers join with the bootstrap token. Once
// kubelet has a certificate (this one or its own), nothing is written.
func (ctrl *KubernetesFilesController) writeKubeletClient(ctx context.Context, r controller.Runtime, log *zap.Logger) error {
	if ctrl.KubeletCertDir == "" {
		return nil
	}

	current := filepath.Join(ctrl.KubeletCertDir, KubeletClientCurrent)
	if _, err := os.Stat(current); err == nil {
		return nil
	}

	root, err := safe.ReaderGetByID[*secrets.KubernetesRoot](ctx, r, secrets.KubernetesRootID)
	if err != nil {
		return ignoreNotFound(err) // a worker: no cluster CA key
	}

	kubelet, err := safe.ReaderGetByID[*secrets.Kubelet](ctx, r, secrets.KubeletID)
	if err != nil {
		return ignoreNotFound(err)
	}

	nodename, err := safe.ReaderGetByID[*k8s.Nodename](ctx, r, k8s.NodenameID)
	if err != nil {
		return ignoreNotFound(err)
	}

	name := nodename.TypedSpec().Nodename

	pair, err := signLocal(root.TypedSpec().IssuingCA,
		want{commonName: "system:node:" + name, orgs: []string{"system:nodes"}, usage: stdx509.ExtKeyUsageClientAuth},
		kubeletClientLifetime, time.Now())
	if err != nil {
		return fmt.Errorf("issuing kubelet's client certificate: %w", err)
	}

	if err = pki.WriteFiles(ctrl.KubeletCertDir, []string{kubeletClientIssued}, map[string][]byte{kubeletClientIssued: append(pair.Crt, pair.Key...)}); err != nil {
		return err
	}

	var cas [][]byte
	for _, ca := range kubelet.TypedSpec().AcceptedCAs {
		cas = append(cas, ca.Crt)
	}

	pairPath := filepath.Join(ctrl.KubeletCertPath, KubeletClientCurrent)

	data, err := kubeconfig.Single{
		ClusterName: "local",
		Cluster:     clientcmdapi.Cluster{Server: kubelet.TypedSpec().Endpoint.String(), CertificateAuthorityData: pki.Bundle(cas...)},
		UserName:    "kubelet",
		User:        clientcmdapi.AuthInfo{ClientCertificate: pairPath, ClientKey: pairPath},
		ContextName: "kubelet@local",
	}.Encode()
	if err != nil {
		return err
	}

	// The kubeconfig before the link: kubelet, when it sees the certificate, finds both.
	if err = pki.WriteFiles(ctrl.KubeletDir, []string{kubeletKubeconfig}, map[string][]byte{kubeletKubeconfig: data}); err != nil {
		return err
	}

	if err = os.Symlink(kubeletClientIssued, current); err != nil {
		return err
	}

	log.Info("issued kubelet's client certificate with the cluster CA", zap.String("node", name))

	return nil
}
