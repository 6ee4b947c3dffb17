package services_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/talos-go/talos/internal/machined/services"
	"github.com/talos-go/talos/internal/machined/testutil/ctrdtest"
)

// The node's containerd config serves the CRI runtime and image services on its socket, with the
// cgroupfs driver; nothing here pulls an image.
func TestContainerdServesCRI(t *testing.T) {
	paths, _ := ctrdtest.StartContainerd(t)

	conn, err := grpc.NewClient("unix://"+paths.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	rt := runtimeapi.NewRuntimeServiceClient(conn)

	v, err := rt.Version(ctx, &runtimeapi.VersionRequest{})
	if err != nil {
		t.Fatalf("CRI Version: %v", err)
	}

	if v.RuntimeName != "containerd" || v.RuntimeApiVersion != "v1" {
		t.Fatalf("CRI Version = %s %s, want containerd v1", v.RuntimeName, v.RuntimeApiVersion)
	}

	st, err := rt.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatalf("CRI Status: %v", err)
	}

	conds := map[string]bool{}
	for _, c := range st.Status.Conditions {
		conds[c.Type] = c.Status
	}

	if !conds[runtimeapi.RuntimeReady] {
		t.Fatalf("CRI runtime is not ready: %v", st.Status.Conditions)
	}

	if _, ok := conds[runtimeapi.NetworkReady]; !ok {
		t.Fatalf("CRI status has no %s condition: %v", runtimeapi.NetworkReady, st.Status.Conditions)
	}

	cfg, err := rt.RuntimeConfig(ctx, &runtimeapi.RuntimeConfigRequest{})
	if err != nil {
		t.Fatalf("CRI RuntimeConfig: %v", err)
	}

	if got := cfg.GetLinux().GetCgroupDriver(); got != runtimeapi.CgroupDriver_CGROUPFS {
		t.Fatalf("cgroup driver = %v, want CGROUPFS (the node has no systemd)", got)
	}

	// The image service answers in the k8s.io namespace; the cache is empty in this test.
	imgs, err := runtimeapi.NewImageServiceClient(conn).ListImages(ctx, &runtimeapi.ListImagesRequest{})
	if err != nil {
		t.Fatalf("CRI ListImages: %v", err)
	}

	if len(imgs.Images) != 0 {
		t.Fatalf("CRI lists %d images in a new containerd, want none", len(imgs.Images))
	}

	if _, err = runtimeapi.NewImageServiceClient(conn).ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: services.SandboxImage}}); err != nil {
		t.Fatalf("CRI ImageStatus of the sandbox image: %v", err)
	}
}
