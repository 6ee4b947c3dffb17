package talosctl

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"
)

func injectCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "inject",
		Short: "Inject Talos API resources into Kubernetes manifests",
	}

	cmd.AddCommand(injectServiceAccountCmd())

	return cmd
}

// injectServiceAccountCmd rewrites manifests so their pods reach the Talos API: each workload
// mounts a Talos ServiceAccount's secret, and the ServiceAccount follows it in the output.
func injectServiceAccountCmd() *cobra.Command {
	var (
		file  string
		roles []string
	)

	cmd := &cobra.Command{
		Use:     "serviceaccount [--roles='<ROLE_1>,<ROLE_2>'] -f <manifest.yaml>",
		Aliases: []string{"sa"},
		Short:   "Inject Talos API ServiceAccount into Kubernetes manifests",
		Example: `talosctl inject serviceaccount --roles="os:admin" -f deployment.yaml > deployment-injected.yaml

Alternatively, stdin can be piped to the command:
cat deployment.yaml | talosctl inject serviceaccount --roles="os:admin" -f - > deployment-injected.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return errors.New("--file: name the manifest to inject into (- for stdin)")
			}

			if _, unknown := role.Parse(roles); len(unknown) > 0 {
				return fmt.Errorf("--roles: unknown roles %s: use os:admin, os:operator, os:reader or os:etcd:backup", strings.Join(unknown, ", "))
			}

			var (
				in  []byte
				err error
			)

			if file == "-" {
				in, err = io.ReadAll(cmd.InOrStdin())
			} else {
				in, err = os.ReadFile(file)
			}

			if err != nil {
				return fmt.Errorf("reading manifests: %w", err)
			}

			out, err := injectServiceAccount(in, roles)
			if err != nil {
				return err
			}

			_, err = cmd.OutOrStdout().Write(out)

			return err
		},
	}

	cmd.Flags().StringVarP(&file, "file", "f", "", "file with Kubernetes manifests to be injected with ServiceAccount")
	cmd.Flags().StringSliceVarP(&roles, "roles", "r", []string{string(role.Reader)}, "roles to add to the generated ServiceAccount manifests")

	return cmd
}

// talosSecretsVolume is the volume injected pods mount the Talos credentials from.
const talosSecretsVolume = "talos-secrets"

// injectServiceAccount transforms a multi-document YAML stream: every workload with a pod
// template gets the talos-secrets volume (the Secret of a ServiceAccount named
// "<name>-talos-secrets") mounted in each container at /var/run/secrets/talos.dev, and that
// ServiceAccount is emitted after it. Other documents pass through unchanged.
func injectServiceAccount(in []byte, roles []string) ([]byte, error) {
	dec := yaml.NewDecoder(bytes.NewReader(in))

	var out bytes.Buffer

	for i := 1; ; i++ {
		var doc map[string]any

		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}

		if err != nil {
			return nil, fmt.Errorf("manifest document %d: %w", i, err)
		}

		if doc == nil {
			continue
		}

		docs := []map[string]any{doc}

		if spec := podSpec(doc); spec != nil {
			meta, _ := doc["metadata"].(map[string]any)
			name, _ := meta["name"].(string)

			if name == "" {
				return nil, fmt.Errorf("manifest document %d (%v): metadata.name is empty: name the workload", i, doc["kind"])
			}

			account := name + "-" + talosSecretsVolume
			if err = injectPodSpec(spec, account); err != nil {
				return nil, fmt.Errorf("manifest document %d (%v %s): %w", i, doc["kind"], name, err)
			}

			saMeta := map[string]any{"name": account}
			if ns, ok := meta["namespace"]; ok {
				saMeta["namespace"] = ns
			}

			docs = append(docs, map[string]any{
				"apiVersion": constants.ServiceAccountResourceGroup + "/" + constants.ServiceAccountResourceVersion,
				"kind":       constants.ServiceAccountResourceKind,
				"metadata":   saMeta,
				"spec":       map[string]any{"roles": roles},
			})
		}

		for _, d := range docs {
			b, err := yaml.Marshal(d)
			if err != nil {
				return nil, err
			}

			out.Write(b)
			out.WriteString("---\n")
		}
	}

	return out.Bytes(), nil
}

// podSpec finds the pod spec of the workload kinds that carry one.
func podSpec(doc map[string]any) map[string]any {
	path := map[string][]string{
		"Pod":                   {"spec"},
		"Deployment":            {"spec", "template", "spec"},
		"StatefulSet":           {"spec", "template", "spec"},
		"DaemonSet":             {"spec", "template", "spec"},
		"ReplicaSet":            {"spec", "template", "spec"},
		"ReplicationController": {"spec", "template", "spec"},
		"Job":                   {"spec", "template", "spec"},
		"CronJob":               {"spec", "jobTemplate", "spec", "template", "spec"},
	}

	kind, _ := doc["kind"].(string)

	keys, ok := path[kind]
	if !ok {
		return nil
	}

	cur := doc

	for _, k := range keys {
		next, ok := cur[k].(map[string]any)
		if !ok {
			return nil
		}

		cur = next
	}

	return cur
}

// injectPodSpec adds the volume and a mount in every container and init container, leaving
// ones already there alone so injecting twice changes nothing.
func injectPodSpec(spec map[string]any, secret string) error {
	volumes, _ := spec["volumes"].([]any)
	if !hasNamed(volumes, talosSecretsVolume) {
		spec["volumes"] = append(volumes, map[string]any{
			"name":   talosSecretsVolume,
			"secret": map[string]any{"secretName": secret},
		})
	}

	for _, key := range []string{"initContainers", "containers"} {
		containers, _ := spec[key].([]any)

		for j, c := range containers {
			container, ok := c.(map[string]any)
			if !ok {
				return fmt.Errorf("%s[%d] is not a mapping", key, j)
			}

			mounts, _ := container["volumeMounts"].([]any)
			if hasNamed(mounts, talosSecretsVolume) {
				continue
			}

			container["volumeMounts"] = append(mounts, map[string]any{
				"name":      talosSecretsVolume,
				"mountPath": constants.ServiceAccountMountPath,
			})
		}
	}

	return nil
}

func hasNamed(items []any, name string) bool {
	for _, it := range items {
		if m, ok := it.(map[string]any); ok && m["name"] == name {
			return true
		}
	}

	return false
}
