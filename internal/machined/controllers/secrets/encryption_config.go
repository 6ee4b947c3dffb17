package secrets

import (
	"fmt"

	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"gopkg.in/yaml.v3"
)

// EncryptionConfig is kube-apiserver's EncryptionConfiguration for Secrets, as upstream: the
// secretbox key (cluster.secretboxEncryptionSecret) encrypts, the AES-CBC key (of configs from
// before it) still decrypts, and identity reads what was stored unencrypted.
func EncryptionConfig(rs *secrets.KubernetesRootSpec) ([]byte, error) {
	type key struct {
		Name   string `yaml:"name"`
		Secret string `yaml:"secret"`
	}

	var providers []map[string]any

	if rs.SecretboxEncryptionSecret != "" {
		providers = append(providers, map[string]any{"secretbox": map[string]any{"keys": []key{{"key2", rs.SecretboxEncryptionSecret}}}})
	}

	if rs.AESCBCEncryptionSecret != "" {
		providers = append(providers, map[string]any{"aescbc": map[string]any{"keys": []key{{"key1", rs.AESCBCEncryptionSecret}}}})
	}

	if len(providers) == 0 {
		return nil, fmt.Errorf("cluster.secretboxEncryptionSecret is empty: set it (talosctl gen secrets makes one)")
	}

	providers = append(providers, map[string]any{"identity": map[string]any{}})

	return yaml.Marshal(map[string]any{
		"apiVersion": "apiserver.config.k8s.io/v1",
		"kind":       "EncryptionConfiguration",
		"resources":  []map[string]any{{"resources": []string{"secrets"}, "providers": providers}},
	})
}
