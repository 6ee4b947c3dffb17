package server_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/state"
	"github.com/cosi-project/runtime/pkg/state/impl/inmem"
	"github.com/cosi-project/runtime/pkg/state/impl/namespaced"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/talos-go/talos/internal/machined/runtime"
	"github.com/talos-go/talos/internal/machined/server"
	"github.com/talos-go/talos/internal/machined/services"
	"github.com/talos-go/talos/internal/machined/system/runner"
	"github.com/talos-go/talos/internal/machined/testutil/ctrdtest"
	"github.com/talos-go/talos/internal/testenv"
)

// imageStream collects what ImageList sends.
type imageStream struct {
	grpc.ServerStream
	ctx  context.Context
	sent []*machine.ImageListResponse
}

func (s *imageStream) Context() context.Context { return s.ctx }

func (s *imageStream) Send(m *machine.ImageListResponse) error {
	s.sent = append(s.sent, m)

	return nil
}

func TestContainersAndImages(t *testing.T) {
	paths, root := ctrdtest.StartContainerd(t)
	ref := "registry.local/hello:v1"
	archive := ctrdtest.HelloImage(t, ref)

	s := &server.Machine{R: &runtime.Runtime{Paths: runtime.Paths{Root: root}, State: state.WrapCore(namespaced.NewState(inmem.Build))}}
	ctx := context.Background()

	// A running system container, started by the containerd runner.
	out := &testenv.SyncBuffer{}
	r := &runner.Containerd{Socket: paths.Socket, ID: "hello", Image: ref, Archive: archive, HostNetwork: true, FIFODir: paths.FIFO, Output: out}

	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)

	go func() { done <- r.Run(runCtx) }()

	defer func() { cancel(); <-done }()

	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(out.String(), "hello from the container") {
		if time.Now().After(deadline) {
			t.Fatalf("the container did not start: %q", out.String())
		}

		time.Sleep(100 * time.Millisecond)
	}

	resp, err := s.Containers(ctx, &machine.ContainersRequest{Namespace: "system"})
	if err != nil {
		t.Fatal(err)
	}

	ctrs := resp.Messages[0].Containers
	if len(ctrs) != 1 || ctrs[0].Id != "hello" || ctrs[0].Image != ref || ctrs[0].Status != "RUNNING" || ctrs[0].Pid == 0 {
		t.Fatalf("containers in system: %v", ctrs)
	}

	// The CRI driver lists k8s.io, where nothing runs.
	resp, err = s.Containers(ctx, &machine.ContainersRequest{Driver: common.ContainerDriver_CRI})
	if err != nil || len(resp.Messages[0].Containers) != 0 {
		t.Fatalf("containers in k8s.io: %v %v", resp, err)
	}

	stream := &imageStream{ctx: ctx}
	if err = s.ImageList(&machine.ImageListRequest{Namespace: common.ContainerdNamespace_NS_SYSTEM}, stream); err != nil {
		t.Fatal(err)
	}

	if len(stream.sent) != 1 || stream.sent[0].Name != ref || stream.sent[0].Size == 0 || !strings.HasPrefix(stream.sent[0].Digest, "sha256:") {
		t.Fatalf("images in system: %v", stream.sent)
	}

	// A registry nobody serves: a clear error, quickly.
	pullCtx, pullCancel := context.WithTimeout(ctx, 30*time.Second)
	defer pullCancel()

	_, err = s.ImagePull(pullCtx, &machine.ImagePullRequest{Reference: "127.0.0.1:1/nothing:v1"})
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "127.0.0.1:1/nothing:v1") {
		t.Fatalf("a pull from an unreachable registry: %v", err)
	}

	if _, err = s.ImagePull(ctx, &machine.ImagePullRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("an empty reference: %v", err)
	}
}

func TestContainersWithoutContainerd(t *testing.T) {
	s := &server.Machine{R: &runtime.Runtime{Paths: runtime.Paths{Root: t.TempDir()}, State: state.WrapCore(namespaced.NewState(inmem.Build))}}

	_, err := s.Containers(context.Background(), &machine.ContainersRequest{})
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "containerd is not running") {
		t.Fatalf("containers without containerd: %v", err)
	}
}

// TestImageCacheImport: the node image's cache is imported into both namespaces.
func TestImageCacheImport(t *testing.T) {
	paths, root := ctrdtest.StartContainerd(t)
	archive := ctrdtest.HelloImage(t, "registry.local/cached:v1")

	var log strings.Builder

	names, err := services.ImportImageCache(context.Background(), paths.Socket, filepath.Dir(archive), &log)
	if err != nil || len(names) != 1 || names[0] != "registry.local/cached:v1" {
		t.Fatalf("import: %v %v\n%s", names, err, log.String())
	}

	s := &server.Machine{R: &runtime.Runtime{Paths: runtime.Paths{Root: root}, State: state.WrapCore(namespaced.NewState(inmem.Build))}}

	for _, ns := range []common.ContainerdNamespace{common.ContainerdNamespace_NS_SYSTEM, common.ContainerdNamespace_NS_CRI} {
		stream := &imageStream{ctx: context.Background()}
		if err = s.ImageList(&machine.ImageListRequest{Namespace: ns}, stream); err != nil {
			t.Fatal(err)
		}

		// In k8s.io the CRI plugin also names each image by its ID (sha256:...).
		found := false

		for _, img := range stream.sent {
			found = found || img.Name == "registry.local/cached:v1"
		}

		if !found {
			t.Errorf("images in %v: %v", ns, stream.sent)
		}
	}
}
