// Package kubeconfig is the one home of kubectl config files (clientcmd v1) in the project:
// client-go's clientcmd types and encoder, and the one-cluster, one-user, one-context shape the
// node writes for its components, kubelet and the admin.
package kubeconfig

import (
	"fmt"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Single names the one cluster, user and context of a kubeconfig; the context is current.
type Single struct {
	ClusterName string
	Cluster     clientcmdapi.Cluster
	UserName    string
	User        clientcmdapi.AuthInfo
	ContextName string
	Namespace   string // the context's namespace; empty for none
}

// Config returns s as a client-go kubeconfig.
func (s Single) Config() *clientcmdapi.Config {
	cfg := clientcmdapi.NewConfig()

	cluster, user := s.Cluster, s.User
	cfg.Clusters[s.ClusterName] = &cluster
	cfg.AuthInfos[s.UserName] = &user
	cfg.Contexts[s.ContextName] = &clientcmdapi.Context{Cluster: s.ClusterName, AuthInfo: s.UserName, Namespace: s.Namespace}
	cfg.CurrentContext = s.ContextName

	return cfg
}

// Encode renders s as YAML (certificates and keys as base64 strings, as kubectl reads them).
func (s Single) Encode() ([]byte, error) { return Encode(s.Config()) }

// Encode renders cfg as YAML.
func Encode(cfg *clientcmdapi.Config) ([]byte, error) {
	out, err := clientcmd.Write(*cfg)
	if err != nil {
		return nil, fmt.Errorf("encoding kubeconfig: %w", err)
	}

	return out, nil
}
