package server

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/talos-go/talos/internal/kubeconfig"
)

// Kubeconfig streams the admin kubeconfig as Talos does: a .tar.gz holding one file named
// kubeconfig, for the cluster endpoint, trusting the Kubernetes CA, with an admin client
// certificate (system:masters) signed by that CA. Only control planes hold the CA key; apid lets
// only os:admin call it.
func (s *Machine) Kubeconfig(_ *emptypb.Empty, srv grpc.ServerStreamingServer[common.Data]) error {
	cfg := s.R.Config()
	if cfg == nil || cfg.Cluster() == nil {
		return status.Error(codes.FailedPrecondition, "the node has no config")
	}

	// The secrets controller's admin kubeconfig (as upstream hands out), else one issued here.
	var data []byte

	if kube, err := safe.StateGetByID[*secrets.Kubernetes](srv.Context(), s.R.State, secrets.KubernetesID); err == nil && kube.TypedSpec().AdminKubeconfig != "" {
		data = []byte(kube.TypedSpec().AdminKubeconfig)
	} else {
		if data, err = adminKubeconfig(cfg, time.Now()); err != nil {
			return err
		}
	}

	archive, err := tarGz("kubeconfig", data)
	if err != nil {
		return status.Errorf(codes.Internal, "packing the kubeconfig: %v", err)
	}

	return srv.Send(&common.Data{Metadata: s.metadata(srv.Context()), Bytes: archive})
}

// adminKubeconfig builds the admin kubeconfig from the cluster part of a control plane's config.
func adminKubeconfig(cfg config.Provider, now time.Time) ([]byte, error) {
	cluster := cfg.Cluster()

	ca := cluster.IssuingCA()
	if ca == nil || len(ca.Crt) == 0 || len(ca.Key) == 0 {
		return nil, status.Error(codes.FailedPrecondition, "this node does not hold the Kubernetes CA key (cluster.ca): ask a control plane node")
	}

	if cluster.Endpoint() == nil {
		return nil, status.Error(codes.FailedPrecondition, "the config has no cluster.controlPlane.endpoint")
	}

	admin := cluster.AdminKubeconfig()

	crt, key, err := issueClient(ca.Crt, ca.Key, admin.CommonName(), []string{admin.CertOrganization()}, admin.CertLifetime(), now)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "issuing the admin certificate from cluster.ca: %v", err)
	}

	bundle := caBundle(ca.Crt, cluster.AcceptedCAs())

	name := cluster.Name()
	user := admin.CommonName() + "@" + name

	out, err := kubeconfig.Single{
		ClusterName: name,
		Cluster:     clientcmdapi.Cluster{Server: cluster.Endpoint().String(), CertificateAuthorityData: bundle},
		UserName:    user,
		User:        clientcmdapi.AuthInfo{ClientCertificateData: crt, ClientKeyData: key},
		ContextName: user,
		Namespace:   "default",
	}.Encode()
	if err != nil {
		return nil, err
	}

	return out, nil
}

func tarGz(name string, data []byte) ([]byte, error) {
	var buf bytes.Buffer

	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)

	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o600, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
		return nil, err
	}

	if _, err := tw.Write(data); err != nil {
		return nil, err
	}

	if err := tw.Close(); err != nil {
		return nil, err
	}

	if err := gz.Close(); err != nil {
		return nil, err
	}

	return buf.Bytes(), nil
}
