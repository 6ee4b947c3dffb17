package secrets

import (
	"context"
	stdx509 "crypto/x509"
	"fmt"
	"path/filepath"
	"time"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"go.uber.org/zap"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/talos-go/talos/internal/kubeconfig"
	"github.com/talos-go/talos/internal/pki"
)

// The folders and files of the Kubernetes secrets, as upstream lays them out: one folder per
// control-plane component under the secrets folder (/system/secrets/kubernetes), and kubelet's
// bootstrap kubeconfig and CA under its config folder (/etc/kubernetes). Static pods mount the
// component folders at ContainerSecretsDir.
const (
	ContainerSecretsDir = constants.KubebernetesStaticSecretsDir

	APIServerDir         = "kube-apiserver"
	ControllerManagerDir = "kube-controller-manager"
	SchedulerDir         = "kube-scheduler"

	FileCA                  = "ca.crt"
	FileCAKey               = "ca.key"
	FileAPIServerCrt        = "apiserver.crt"
	FileAPIServerKey        = "apiserver.key"
	FileKubeletClientCrt    = "apiserver-kubelet-client.crt"
	FileKubeletClientKey    = "apiserver-kubelet-client.key"
	FileFrontProxyCrt       = "front-proxy-client.crt"
	FileFrontProxyKey       = "front-proxy-client.key"
	FileAggregatorCA        = "aggregator-ca.crt"
	FileServiceAccountKey   = "service-account.key"
	FileServiceAccountPub   = "service-account.pub"
	FileEtcdCA              = "etcd-client-ca.crt"
	FileEtcdClientCrt       = "etcd-client.crt"
	FileEtcdClientKey       = "etcd-client.key"
	FileEncryptionConfig    = "encryptionconfig.yaml"
	FileKubeconfig          = "kubeconfig"
	FileBootstrapKubeconfig = "bootstrap-kubeconfig"
	KubeletCAFile           = "pki/ca.crt"
)

// KubernetesFilesController writes the Kubernetes secrets where the static pods and kubelet
// read them: keys 0600, folders 0700, each file replaced atomically. Every node gets kubelet's
// bootstrap kubeconfig and CA; control planes get the components' folders, with a client
// certificate to the local etcd (signed by cluster.etcd.ca, renewed with the API server's).
type KubernetesFilesController struct {
	SecretsDir string // /system/secrets/kubernetes
	KubeletDir string // /etc/kubernetes
	// KubeletCertDir is kubelet's certificate folder as machined sees it, KubeletCertPath as
	// kubelet does (/var/lib/kubelet/pki); empty where no kubelet runs.
	KubeletCertDir, KubeletCertPath string
	// Lifetime of the etcd client certificate; DefaultLifetime when zero.
	Lifetime time.Duration

	written map[string]string // what was last written: input versions
}

// Name implements controller.Controller.
func (ctrl *KubernetesFilesController) Name() string { return "secrets.KubernetesFilesController" }

// Inputs implements controller.Controller.
func (ctrl *KubernetesFilesController) Inputs() []controller.Input {
	return []controller.Input{
		{Namespace: secrets.NamespaceName, Type: secrets.KubeletType, ID: optional.Some(secrets.KubeletID), Kind: controller.InputWeak},
		{Namespace: secrets.NamespaceName, Type: secrets.KubernetesRootType, ID: optional.Some(secrets.KubernetesRootID), Kind: controller.InputWeak},
		{Namespace: secrets.NamespaceName, Type: secrets.KubernetesType, ID: optional.Some(secrets.KubernetesID), Kind: controller.InputWeak},
		{Namespace: secrets.NamespaceName, Type: secrets.KubernetesDynamicCertsType, ID: optional.Some(secrets.KubernetesDynamicCertsID), Kind: controller.InputWeak},
		{Namespace: config.NamespaceName, Type: config.MachineConfigType, ID: optional.Some(config.ActiveID), Kind: controller.InputWeak},
		{Namespace: k8s.NamespaceName, Type: k8s.NodenameType, ID: optional.Some(k8s.NodenameID), Kind: controller.InputWeak},
	}
}

// Outputs implements controller.Controller.
func (ctrl *KubernetesFilesController) Outputs() []controller.Output { return nil }

// Run implements controller.Controller.
func (ctrl *KubernetesFilesController) Run(ctx context.Context, r controller.Runtime, log *zap.Logger) error {
	ctrl.written = map[string]string{}

	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.EventCh():
		}

		if err := ctrl.writeKubelet(ctx, r, log); err != nil {
			log.Error("writing kubelet's bootstrap files", zap.Error(err))
		}

		if err := ctrl.writeControlPlane(ctx, r, log); err != nil {
			log.Error("writing the control plane's secrets", zap.Error(err))
		}

		if err := ctrl.writeKubeletClient(ctx, r, log); err != nil {
			log.Error("writing the control plane kubelet's client certificate", zap.Error(err))
		}
	}
}

func (ctrl *KubernetesFilesController) writeKubelet(ctx context.Context, r controller.Runtime, log *zap.Logger) error {
	res, err := safe.ReaderGetByID[*secrets.Kubelet](ctx, r, secrets.KubeletID)
	if err != nil {
		return ignoreNotFound(err)
	}

	if ctrl.written["kubelet"] == res.Metadata().Version().String() {
		return nil
	}

	spec := res.TypedSpec()

	var cas [][]byte
	for _, ca := range spec.AcceptedCAs {
		cas = append(cas, ca.Crt)
	}

	ca := pki.Bundle(cas...)

	kc, err := BootstrapKubeconfig(spec, ca)
	if err != nil {
		return err
	}

	if err = pki.WriteFiles(ctrl.KubeletDir, []string{FileBootstrapKubeconfig}, map[string][]byte{FileBootstrapKubeconfig: []byte(kc)}); err != nil {
		return err
	}

	if err = pki.WriteFiles(filepath.Join(ctrl.KubeletDir, filepath.Dir(KubeletCAFile)), []string{filepath.Base(KubeletCAFile)}, map[string][]byte{filepath.Base(KubeletCAFile): ca}); err != nil {
		return err
	}

	ctrl.written["kubelet"] = res.Metadata().Version().String()
	log.Info("wrote kubelet's bootstrap kubeconfig", zap.String("dir", ctrl.KubeletDir))

	return nil
}

// BootstrapKubeconfig is kubelet's bootstrap kubeconfig: the endpoint, the CAs, and the
// bootstrap token as its credential, as upstream writes it.
func BootstrapKubeconfig(spec *secrets.KubeletSpec, caPEM []byte) (string, error) {
	out, err := kubeconfig.Single{
		ClusterName: "local",
		Cluster:     clientcmdapi.Cluster{Server: spec.Endpoint.String(), CertificateAuthorityData: caPEM},
		UserName:    "kubelet-bootstrap",
		User:        clientcmdapi.AuthInfo{Token: spec.BootstrapTokenID + "." + spec.BootstrapTokenSecret},
		ContextName: "kubelet-bootstrap@local",
	}.Encode()

	return string(out), err
}

func (ctrl *KubernetesFilesController) writeControlPlane(ctx context.Context, r controller.Runtime, log *zap.Logger) error {
	root, err := safe.ReaderGetByID[*secrets.KubernetesRoot](ctx, r, secrets.KubernetesRootID)
	if err != nil {
		return ignoreNotFound(err)
	}

	certs, err := safe.ReaderGetByID[*secrets.KubernetesDynamicCerts](ctx, r, secrets.KubernetesDynamicCertsID)
	if err != nil {
		return ignoreNotFound(err)
	}

	kubeconfigs, err := safe.ReaderGetByID[*secrets.Kubernetes](ctx, r, secrets.KubernetesID)
	if err != nil {
		return ignoreNotFound(err)
	}

	cfg, err := safe.ReaderGetByID[*config.MachineConfig](ctx, r, config.ActiveID)
	if err != nil {
		return ignoreNotFound(err)
	}

	version := root.Metadata().Version().String() + "/" + certs.Metadata().Version().String() + "/" + kubeconfigs.Metadata().Version().String()
	if ctrl.written["control-plane"] == version {
		return nil
	}

	rs, cs, ks := root.TypedSpec(), certs.TypedSpec(), kubeconfigs.TypedSpec()

	if cfg.Config().Cluster() == nil || cfg.Config().Cluster().Etcd() == nil || cfg.Config().Cluster().Etcd().CA() == nil {
		return fmt.Errorf("the machine config has no cluster.etcd.ca")
	}

	etcdCA := cfg.Config().Cluster().Etcd().CA()

	etcdClient, err := signLocal(etcdCA, want{commonName: "kube-apiserver", usage: stdx509.ExtKeyUsageClientAuth}, Lifetime(ctrl.Lifetime), time.Now())
	if err != nil {
		return fmt.Errorf("issuing kube-apiserver's etcd client certificate: %w", err)
	}

	saPub, err := publicKeyPEM(rs.ServiceAccount)
	if err != nil {
		return fmt.Errorf("cluster.serviceAccount: %w", err)
	}

	encryption, err := EncryptionConfig(rs)
	if err != nil {
		return err
	}

	ca := caBundlePEM(rs)
	folders := []struct {
		dir   string
		order []string
		files map[string][]byte
	}{
		{APIServerDir, []string{FileServiceAccountKey, FileAPIServerKey, FileKubeletClientKey, FileFrontProxyKey, FileEtcdClientKey, FileEncryptionConfig,
			FileCA, FileAPIServerCrt, FileKubeletClientCrt, FileFrontProxyCrt, FileAggregatorCA, FileServiceAccountPub, FileEtcdCA, FileEtcdClientCrt}, map[string][]byte{
			FileCA: ca, FileAPIServerCrt: cs.APIServer.Crt, FileAPIServerKey: cs.APIServer.Key,
			FileKubeletClientCrt: cs.APIServerKubeletClient.Crt, FileKubeletClientKey: cs.APIServerKubeletClient.Key,
			FileFrontProxyCrt: cs.FrontProxy.Crt, FileFrontProxyKey: cs.FrontProxy.Key, FileAggregatorCA: rs.AggregatorCA.Crt,
			FileServiceAccountKey: rs.ServiceAccount.Key, FileServiceAccountPub: saPub,
			FileEtcdCA: etcdCA.Crt, FileEtcdClientCrt: etcdClient.Crt, FileEtcdClientKey: etcdClient.Key,
			FileEncryptionConfig: encryption,
		}},
		{ControllerManagerDir, []string{FileCAKey, FileServiceAccountKey, FileKubeconfig, FileCA}, map[string][]byte{
			FileCA: rs.IssuingCA.Crt, FileCAKey: rs.IssuingCA.Key, FileServiceAccountKey: rs.ServiceAccount.Key,
			FileKubeconfig: []byte(ks.ControllerManagerKubeconfig),
		}},
		{SchedulerDir, []string{FileKubeconfig}, map[string][]byte{FileKubeconfig: []byte(ks.SchedulerKubeconfig)}},
	}

	for _, f := range folders {
		if err = pki.WriteFiles(filepath.Join(ctrl.SecretsDir, f.dir), f.order, f.files); err != nil {
			return err
		}
	}

	ctrl.written["control-plane"] = version
	log.Info("wrote the control plane's secrets", zap.String("dir", ctrl.SecretsDir))

	return nil
}

func publicKeyPEM(key *x509.PEMEncodedKey) ([]byte, error) {
	if key == nil {
		return nil, fmt.Errorf("missing")
	}

	k, err := key.GetKey()
	if err != nil {
		return nil, err
	}

	return k.GetPublicKeyPEM(), nil
}

func ignoreNotFound(err error) error {
	if state.IsNotFoundError(err) {
		return nil
	}

	return err
}
