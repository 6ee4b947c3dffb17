package secrets

import (
	"encoding/base64"
	"fmt"

	"github.com/siderolabs/crypto/x509"
	"gopkg.in/yaml.v3"
)

// kubeconfig is the part of kubectl's config file format (clientcmd v1) the node writes: one
// cluster, one user, one context. Certificates and keys are base64 strings, as the format wants.
type kubeconfig struct {
	APIVersion     string         `yaml:"apiVersion"`
	Kind           string         `yaml:"kind"`
	Clusters       []namedCluster `yaml:"clusters"`
	Users          []namedUser    `yaml:"users"`
	Contexts       []namedContext `yaml:"contexts"`
	CurrentContext string         `yaml:"current-context"`
}

type namedCluster struct {
	Name    string `yaml:"name"`
	Cluster struct {
		Server string      `yaml:"server"`
		CAData base64Bytes `yaml:"certificate-authority-data"`
	} `yaml:"cluster"`
}

type namedUser struct {
	Name string `yaml:"name"`
	User struct {
		CertData base64Bytes `yaml:"client-certificate-data,omitempty"`
		KeyData  base64Bytes `yaml:"client-key-data,omitempty"`
		Token    string      `yaml:"token,omitempty"`
		CertFile string      `yaml:"client-certificate,omitempty"`
		KeyFile  string      `yaml:"client-key,omitempty"`
	} `yaml:"user"`
}

// base64Bytes is a byte field that YAML carries as a base64 string (yaml.v3 would write a
// list of numbers, which kubectl refuses).
type base64Bytes []byte

// MarshalYAML implements yaml.Marshaler.
func (b base64Bytes) MarshalYAML() (any, error) { return base64.StdEncoding.EncodeToString(b), nil }

// UnmarshalYAML implements yaml.Unmarshaler.
func (b *base64Bytes) UnmarshalYAML(node *yaml.Node) error {
	data, err := base64.StdEncoding.DecodeString(node.Value)
	if err != nil {
		return fmt.Errorf("kubeconfig line %d: not base64: %w", node.Line, err)
	}

	*b = data

	return nil
}

type namedContext struct {
	Name    string `yaml:"name"`
	Context struct {
		Cluster string `yaml:"cluster"`
		User    string `yaml:"user"`
	} `yaml:"context"`
}

// Kubeconfig renders a kubeconfig with one cluster, one user and one context "<user>@<cluster>",
// as upstream names them.
func Kubeconfig(cluster, user, server string, caPEM []byte, pair *x509.PEMEncodedCertificateAndKey) (string, error) {
	ctxName := user + "@" + cluster

	kc := kubeconfig{APIVersion: "v1", Kind: "Config", CurrentContext: ctxName}
	kc.Clusters = []namedCluster{{Name: cluster}}
	kc.Clusters[0].Cluster.Server = server
	kc.Clusters[0].Cluster.CAData = caPEM
	kc.Users = []namedUser{{Name: ctxName}}
	kc.Users[0].User.CertData = pair.Crt
	kc.Users[0].User.KeyData = pair.Key
	kc.Contexts = []namedContext{{Name: ctxName}}
	kc.Contexts[0].Context.Cluster = cluster
	kc.Contexts[0].Context.User = ctxName

	return kc.render()
}

func (kc kubeconfig) render() (string, error) {
	out, err := yaml.Marshal(kc)
	if err != nil {
		return "", fmt.Errorf("encoding kubeconfig: %w", err)
	}

	return string(out), nil
}

// parseKubeconfig reads back what Kubeconfig wrote: the server, the CA and the client pair.
func parseKubeconfig(data string) (server string, caPEM []byte, pair *x509.PEMEncodedCertificateAndKey, err error) {
	var kc kubeconfig

	if err = yaml.Unmarshal([]byte(data), &kc); err != nil {
		return "", nil, nil, err
	}

	if len(kc.Clusters) != 1 || len(kc.Users) != 1 {
		return "", nil, nil, fmt.Errorf("kubeconfig has %d clusters and %d users, want one each", len(kc.Clusters), len(kc.Users))
	}

	u := kc.Users[0].User

	return kc.Clusters[0].Cluster.Server, kc.Clusters[0].Cluster.CAData, &x509.PEMEncodedCertificateAndKey{Crt: u.CertData, Key: u.KeyData}, nil
}
