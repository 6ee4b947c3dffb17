package services

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"

	k8sctrl "github.com/talos-go/talos/internal/machined/controllers/k8s"
	"github.com/talos-go/talos/internal/machined/runtime"
)

// waitAPIServerBeforeJoin holds a worker's kubelet until the cluster's API server answers, when
// the kubelet has not joined yet (no client certificate): a kubelet that starts first asks for
// its certificate while the API server is down, backs off, and joins tens of seconds after the
// API server is up. A control plane's kubelet starts at once: it runs the API server.
func waitAPIServerBeforeJoin(ctx context.Context, r *runtime.Runtime) error {
	if r.MachineType(ctx).IsControlPlane() {
		return nil
	}

	if _, err := os.Stat(filepath.Join(r.Paths.Root, k8sctrl.KubeletCertDir, "kubelet-client-current.pem")); err == nil {
		return nil
	}

	kubelet, err := safe.StateWatchFor[*secrets.Kubelet](ctx, r.State, secrets.NewKubelet(secrets.KubeletID).Metadata())
	if err != nil {
		return err
	}

	endpoint := kubelet.TypedSpec().Endpoint
	if endpoint == nil {
		return nil
	}

	// Reachability only: no credential is sent and the answer's content does not matter.
	client := &http.Client{
		Timeout:   2 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, //nolint:gosec // a probe that sends nothing
	}
	defer client.CloseIdleConnections()

	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint.JoinPath("readyz").String(), nil)
		if err != nil {
			return fmt.Errorf("the cluster endpoint %s: %w", endpoint, err)
		}

		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()

			return nil
		}

		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}
