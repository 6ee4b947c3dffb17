package k8s

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"go.uber.org/zap"
)

// StaticPodServerController serves the StaticPod resources to kubelet as one pod list on a
// loopback HTTP address (kubelet's staticPodURL), as upstream, and publishes that address in
// StaticPodServerStatus. Only the node itself reaches loopback, and the pods hold no secrets
// (they mount the secrets folders).
type StaticPodServerController struct {
	// Listen is the address to listen on (default 127.0.0.1:0, a free port).
	Listen string

	mu   sync.Mutex
	body []byte
}

// Name implements controller.Controller.
func (ctrl *StaticPodServerController) Name() string { return "k8s.StaticPodServerController" }

// Inputs implements controller.Controller.
func (ctrl *StaticPodServerController) Inputs() []controller.Input {
	return []controller.Input{{Namespace: k8s.NamespaceName, Type: k8s.StaticPodType, Kind: controller.InputWeak}}
}

// Outputs implements controller.Controller.
func (ctrl *StaticPodServerController) Outputs() []controller.Output {
	return []controller.Output{{Type: k8s.StaticPodServerStatusType, Kind: controller.OutputExclusive}}
}

// Run implements controller.Controller.
func (ctrl *StaticPodServerController) Run(ctx context.Context, r controller.Runtime, log *zap.Logger) error {
	addr := ctrl.Listen
	if addr == "" {
		addr = "127.0.0.1:0"
	}

	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("listening for the static pod server: %w", err)
	}

	srv := &http.Server{Handler: http.HandlerFunc(ctrl.serve), ReadHeaderTimeout: 10 * time.Second}

	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("static pod server", zap.Error(err))
		}
	}()

	defer srv.Close() // stopping with the controller

	if err = ctrl.render(ctx, r); err != nil {
		return err
	}

	if err = safe.WriterModify(ctx, r, k8s.NewStaticPodServerStatus(k8s.NamespaceName, k8s.StaticPodServerStatusResourceID), func(res *k8s.StaticPodServerStatus) error {
		res.TypedSpec().URL = "http://" + ln.Addr().String()

		return nil
	}); err != nil {
		return err
	}

	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.EventCh():
		}

		if err = ctrl.render(ctx, r); err != nil {
			return err
		}
	}
}

// render builds the pod list kubelet is served from the StaticPod resources, in ID order.
func (ctrl *StaticPodServerController) render(ctx context.Context, r controller.Runtime) error {
	pods, err := safe.ReaderListAll[*k8s.StaticPod](ctx, r)
	if err != nil {
		return err
	}

	items := []map[string]any{}

	for p := range pods.All() {
		items = append(items, p.TypedSpec().Pod)
	}

	slices.SortFunc(items, func(a, b map[string]any) int { return compareNames(a, b) })

	body, err := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "PodList", "items": items})
	if err != nil {
		return fmt.Errorf("encoding the static pods: %w", err)
	}

	ctrl.mu.Lock()
	ctrl.body = body
	ctrl.mu.Unlock()

	return nil
}

func compareNames(a, b map[string]any) int {
	name := func(p map[string]any) string {
		md, _ := p["metadata"].(map[string]any)
		n, _ := md["name"].(string)

		return n
	}

	switch na, nb := name(a), name(b); {
	case na < nb:
		return -1
	case na > nb:
		return 1
	default:
		return 0
	}
}

func (ctrl *StaticPodServerController) serve(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodGet {
		http.Error(w, "only GET", http.StatusMethodNotAllowed)

		return
	}

	ctrl.mu.Lock()
	body := ctrl.body
	ctrl.mu.Unlock()

	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body)
}
