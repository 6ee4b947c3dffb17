// Package cluster holds the controllers of the cluster namespace: the node's identity and the
// members of its cluster, found through the discovery service (upstream's protocol) and merged.
package cluster

import (
	"context"
	"crypto/rand"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"go.uber.org/zap"

	"github.com/talos-go/talos/internal/atomicfile"
)

// NodeIDFile is the file in STATE holding the node's id, so it survives reboots, not wipes.
const NodeIDFile = "node-id"

// IdentityController publishes the local Identity: the node id, made on first boot.
type IdentityController struct {
	StateDir string // STATE
}

// Name implements controller.Controller.
func (ctrl *IdentityController) Name() string { return "cluster.IdentityController" }

// Inputs implements controller.Controller.
func (ctrl *IdentityController) Inputs() []controller.Input { return nil }

// Outputs implements controller.Controller.
func (ctrl *IdentityController) Outputs() []controller.Output {
	return []controller.Output{{Type: cluster.IdentityType, Kind: controller.OutputExclusive}}
}

// Run implements controller.Controller.
func (ctrl *IdentityController) Run(ctx context.Context, r controller.Runtime, _ *zap.Logger) error {
	id, err := ctrl.nodeID()
	if err != nil {
		return err
	}

	if err = safe.WriterModify(ctx, r, cluster.NewIdentity(cluster.NamespaceName, cluster.LocalIdentity), func(res *cluster.Identity) error {
		res.TypedSpec().NodeID = id

		return nil
	}); err != nil {
		return fmt.Errorf("writing identity: %w", err)
	}

	<-ctx.Done()

	return nil
}

// nodeID loads the node's id, making one on first boot.
func (ctrl *IdentityController) nodeID() (string, error) {
	path := filepath.Join(ctrl.StateDir, NodeIDFile)

	if data, err := os.ReadFile(path); err == nil && len(strings.TrimSpace(string(data))) > 0 {
		return strings.TrimSpace(string(data)), nil
	}

	const alphabet = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"

	var b strings.Builder

	for range 43 {
		n, err := rand.Int(rand.Reader, big.NewInt(int64(len(alphabet))))
		if err != nil {
			return "", err
		}

		b.WriteByte(alphabet[n.Int64()])
	}

	if err := atomicfile.WriteFile(path, []byte(b.String()+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("saving node id: %w", err)
	}

	return b.String(), nil
}
