package talosctl

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	x509 "github.com/siderolabs/crypto/x509"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	configres "github.com/siderolabs/talos/pkg/machinery/resources/config"
	secretsres "github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"github.com/spf13/cobra"
)

type rotateCAFlags struct {
	controlPlanes, workers        []string
	dryRun, talos, kubernetes     bool
	output, initNode, k8sEndpoint string
	withDocs, withExamples        bool
}

// rotateCACmd rotates the Talos API CA in three steps that never cut the user off: the nodes
// accept the new CA beside the old, then switch to it (the old one still accepted, the client
// already on a certificate from the new CA), then drop the old one.
func rotateCACmd(g *Global) *cobra.Command {
	var fl rotateCAFlags

	cmd := &cobra.Command{
		Use:   "rotate-ca",
		Short: "Rotate cluster CAs (Talos and Kubernetes APIs).",
		Long: `Rotate the Talos API CA (and the Kubernetes API CA where the nodes run Kubernetes).

The new CA is first accepted beside the old one on every node, then made the issuing CA (the
old one still accepted), then the old one is dropped; the talosconfig gets a client certificate
from the new CA before the switch. With --dry-run (the default) the nodes validate each change
and nothing is applied.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(fl.controlPlanes) == 0 {
				return errors.New("--control-plane-nodes: name the control plane nodes (and the workers with --worker-nodes)")
			}

			return g.run(cmd, func(ctx context.Context, s *session) error {
				if fl.kubernetes {
					if err := kubernetesCAPresent(ctx, s.c, fl.controlPlanes[0]); err != nil {
						return err
					}
				}

				if !fl.talos {
					return nil
				}

				return rotateTalosCA(ctx, cmd.OutOrStdout(), g, fl)
			})
		},
	}

	f := cmd.Flags()
	f.StringSliceVar(&fl.controlPlanes, "control-plane-nodes", nil, "specify IPs of control plane nodes")
	f.StringSliceVar(&fl.workers, "worker-nodes", nil, "specify IPs of worker nodes")
	f.BoolVar(&fl.dryRun, "dry-run", true, "dry-run mode (no changes to the cluster)")
	f.BoolVar(&fl.talos, "talos", true, "rotate Talos API CA")
	f.BoolVar(&fl.kubernetes, "kubernetes", true, "rotate Kubernetes API CA")
	f.StringVarP(&fl.output, "output", "o", "", "path to the output new `talosconfig` (default: the talosconfig in use)")
	f.StringVar(&fl.initNode, "init-node", "", "specify IPs of init node")
	f.StringVar(&fl.k8sEndpoint, "k8s-endpoint", "", "use endpoint instead of kubeconfig default")
	f.BoolVar(&fl.withDocs, "with-docs", true, "patch all machine configs adding the documentation for each field")
	f.BoolVar(&fl.withExamples, "with-examples", true, "patch all machine configs with the commented examples")

	return cmd
}

// kubernetesCAPresent refuses the Kubernetes part where the nodes hold no Kubernetes CA, and
// says the rotation of a present one is not written yet: either way nothing has changed.
func kubernetesCAPresent(ctx context.Context, c *client.Client, node string) error {
	_, err := safe.StateGetByID[*secretsres.KubernetesRoot](client.WithNode(ctx, node), c.COSI, secretsres.KubernetesRootID)
	if state.IsNotFoundError(err) {
		return fmt.Errorf("the Kubernetes CA: %s holds no Kubernetes secrets (no %s resource): these nodes run no Kubernetes; rotate the Talos API CA alone with --kubernetes=false", node, secretsres.KubernetesRootType)
	}

	if err != nil {
		return fmt.Errorf("the Kubernetes CA on %s: %w", node, err)
	}

	return fmt.Errorf("the Kubernetes CA on %s: its rotation is not implemented by this talosctl yet; pass --kubernetes=false to rotate the Talos API CA alone", node)
}

func rotateTalosCA(ctx context.Context, w io.Writer, g *Global, fl rotateCAFlags) error {
	r, err := newTalosCARotation(g, fl)
	if err != nil {
		return err
	}

	// Step 1: every node accepts the new CA beside its own.
	fmt.Fprintf(w, "> Talos API CA: accepting the new CA on %v\n", r.nodes)

	oldClient, err := r.connect(ctx, *r.cctx)
	if err != nil {
		return err
	}

	defer oldClient.Close()

	if err = patchNodes(ctx, w, oldClient, r.nodes, fl.dryRun, func(_ string, c *v1alpha1.Config) {
		c.MachineConfig.MachineAcceptedCAs = append(c.MachineConfig.MachineAcceptedCAs, r.newCrt)
	}); err != nil {
		return err
	}

	if fl.dryRun {
		fmt.Fprintln(w, "> dry run: the nodes validated the first step; the switch to the new CA and dropping the old one follow the same way. Run with --dry-run=false to rotate.")

		return nil
	}

	// Step 2: the client moves to a certificate from the new CA trusting both CAs, saved before
	// the nodes switch so an interruption leaves a talosconfig that works.
	both, err := r.bothCAsContext()
	if err != nil {
		return err
	}

	if err = saveContext(r.cfg, r.ctxName, both, r.out); err != nil {
		return err
	}

	bothClient, err := r.connect(ctx, both)
	if err != nil {
		return err
	}

	defer bothClient.Close()

	if err = waitAnswer(ctx, bothClient, r.nodes); err != nil {
		return fmt.Errorf("a node does not take the client certificate from the new CA: %w (the saved talosconfig %s and the old CA still work)", err, r.out)
	}

	fmt.Fprintf(w, "> Talos API CA: switching %v to the new CA\n", r.nodes)

	if err = r.switchNodes(ctx, w, bothClient); err != nil {
		return err
	}

	// Step 3: the old CA goes; the client trusts the new one only.
	fmt.Fprintf(w, "> Talos API CA: dropping the old CA on %v\n", r.nodes)

	if err = patchNodes(ctx, w, bothClient, r.nodes, false, func(_ string, c *v1alpha1.Config) {
		c.MachineConfig.MachineAcceptedCAs = replaceCA(c.MachineConfig.MachineAcceptedCAs, r.oldCrt, nil)
	}); err != nil {
		return err
	}

	final := both
	final.CA = base64.StdEncoding.EncodeToString(r.newCA.CrtPEM)

	finalClient, err := r.connect(ctx, final)
	if err != nil {
		return err
	}

	defer finalClient.Close()

	if err = waitAnswer(ctx, finalClient, r.nodes); err != nil {
		return fmt.Errorf("a node does not serve a certificate from the new CA yet: %w (talosconfig %s trusts both CAs meanwhile)", err, r.out)
	}

	if err = saveContext(r.cfg, r.ctxName, final, r.out); err != nil {
		return err
	}

	fmt.Fprintf(w, "> Talos API CA rotated; talosconfig %s updated\n", r.out)

	return nil
}

// talosCARotation is what the Talos API CA's rotation works with: the talosconfig's context and
// its CA, the new CA, the nodes.
type talosCARotation struct {
	cfg            *clientconfig.Config
	ctxName        string
	cctx           *clientconfig.Context
	out            string // where the new talosconfig is saved
	endpoints      []string
	oldCA          []byte
	newCA          *x509.CertificateAuthority
	oldCrt, newCrt *x509.PEMEncodedCertificate
	nodes          []string
	controlPlanes  []string
}

// newTalosCARotation reads the talosconfig's context and generates the new CA.
func newTalosCARotation(g *Global, fl rotateCAFlags) (*talosCARotation, error) {
	cfg, path, err := loadConfig(g.Talosconfig, false)
	if err != nil {
		return nil, err
	}

	ctxName, cctx, err := currentContext(cfg, g.Context, path)
	if err != nil {
		return nil, err
	}

	oldCA, err := base64.StdEncoding.DecodeString(cctx.CA)
	if err != nil {
		return nil, fmt.Errorf("talosconfig context %q: ca: %w", ctxName, err)
	}

	newCA, err := secrets.NewTalosCA(time.Now())
	if err != nil {
		return nil, fmt.Errorf("generating the new CA: %w", err)
	}

	r := &talosCARotation{
		cfg: cfg, ctxName: ctxName, cctx: cctx, out: fl.output, endpoints: g.Endpoints,
		oldCA: oldCA, newCA: newCA,
		oldCrt: &x509.PEMEncodedCertificate{Crt: oldCA}, newCrt: &x509.PEMEncodedCertificate{Crt: newCA.CrtPEM},
		nodes: append(slices.Clone(fl.controlPlanes), fl.workers...), controlPlanes: fl.controlPlanes,
	}

	if len(r.endpoints) == 0 {
		r.endpoints = cctx.Endpoints
	}

	if r.out == "" {
		r.out = path
	}

	return r, nil
}

// connect is a client of the rotation's endpoints with the context ctxCfg.
func (r *talosCARotation) connect(ctx context.Context, ctxCfg clientconfig.Context) (*client.Client, error) {
	cc := &clientconfig.Config{Context: r.ctxName, Contexts: map[string]*clientconfig.Context{r.ctxName: &ctxCfg}}

	return client.New(ctx, client.WithConfig(cc), client.WithEndpoints(r.endpoints...), client.WithDefaultGRPCDialOptions())
}

// bothCAsContext is the talosconfig context of step 2: an admin certificate from the new CA,
// trusting both CAs.
func (r *talosCARotation) bothCAsContext() (clientconfig.Context, error) {
	admin, err := secrets.NewAdminCertificateAndKey(time.Now(), x509.NewCertificateAndKeyFromCertificateAuthority(r.newCA), role.MakeSet(role.Admin), constants.TalosAPIDefaultCertificateValidityDuration)
	if err != nil {
		return clientconfig.Context{}, fmt.Errorf("issuing the client certificate: %w", err)
	}

	both := *r.cctx
	both.CA = base64.StdEncoding.EncodeToString(bytes.Join([][]byte{bytes.TrimSpace(r.oldCA), bytes.TrimSpace(r.newCA.CrtPEM)}, []byte("\n")))
	both.Crt = base64.StdEncoding.EncodeToString(admin.Crt)
	both.Key = base64.StdEncoding.EncodeToString(admin.Key)

	return both, nil
}

// switchNodes makes the new CA the nodes' own (with its key on control planes), the old one
// accepted beside it.
func (r *talosCARotation) switchNodes(ctx context.Context, w io.Writer, c *client.Client) error {
	return patchNodes(ctx, w, c, r.nodes, false, func(node string, c *v1alpha1.Config) {
		ca := &x509.PEMEncodedCertificateAndKey{Crt: r.newCA.CrtPEM}
		if slices.Contains(r.controlPlanes, node) {
			ca.Key = r.newCA.KeyPEM
		}

		c.MachineConfig.MachineCA = ca
		c.MachineConfig.MachineAcceptedCAs = replaceCA(c.MachineConfig.MachineAcceptedCAs, r.newCrt, r.oldCrt)
	})
}

// replaceCA drops drop from the accepted CAs and adds add (when not nil).
func replaceCA(accepted []*x509.PEMEncodedCertificate, drop, add *x509.PEMEncodedCertificate) []*x509.PEMEncodedCertificate {
	var out []*x509.PEMEncodedCertificate

	for _, ca := range accepted {
		if !bytes.Equal(bytes.TrimSpace(ca.Crt), bytes.TrimSpace(drop.Crt)) {
			out = append(out, ca)
		}
	}

	if add != nil {
		out = append(out, add)
	}

	return out
}

// patchNodes reads each node's machine config, changes it and applies it without a reboot
// (or asks the node to validate it, for a dry run), node after node.
func patchNodes(ctx context.Context, w io.Writer, c *client.Client, nodes []string, dryRun bool, patch func(node string, c *v1alpha1.Config)) error {
	for _, node := range nodes {
		nctx := client.WithNode(ctx, node)

		res, err := safe.StateGetByID[*configres.MachineConfig](nctx, c.COSI, configres.ActiveID)
		if err != nil {
			return fmt.Errorf("%s: reading the machine config: %w", node, err)
		}

		cfg, err := res.Provider().PatchV1Alpha1(func(cfg *v1alpha1.Config) error {
			patch(node, cfg)

			return nil
		})
		if err != nil {
			return fmt.Errorf("%s: %w", node, err)
		}

		data, err := cfg.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
		if err != nil {
			return fmt.Errorf("%s: %w", node, err)
		}

		resp, err := c.ApplyConfiguration(nctx, &machineapi.ApplyConfigurationRequest{Data: data, Mode: machineapi.ApplyConfigurationRequest_NO_REBOOT, DryRun: dryRun})
		if err != nil {
			return fmt.Errorf("%s: applying the machine config: %w", node, err)
		}

		for _, m := range resp.GetMessages() {
			fmt.Fprintf(w, "  %s: %s\n", node, m.GetModeDetails())
		}
	}

	return nil
}

// waitAnswer waits until every node answers the client (new certificates take a moment to be
// issued and loaded).
func waitAnswer(ctx context.Context, c *client.Client, nodes []string) error {
	for _, node := range nodes {
		deadline := time.Now().Add(time.Minute)

		for {
			_, err := c.Version(client.WithNode(ctx, node))
			if err == nil {
				break
			}

			if time.Now().After(deadline) {
				return fmt.Errorf("%s: %w", node, err)
			}

			time.Sleep(time.Second)
		}
	}

	return nil
}

func saveContext(cfg *clientconfig.Config, name string, c clientconfig.Context, path string) error {
	cfg.Contexts[name] = &c

	if err := cfg.Save(path); err != nil {
		return fmt.Errorf("saving talosconfig %s: %w", path, err)
	}

	return nil
}
