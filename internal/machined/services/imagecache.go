package services

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"

	"github.com/talos-go/talos/internal/imager"
	"github.com/talos-go/talos/internal/machined/runtime"
	"github.com/talos-go/talos/internal/machined/system"
	"github.com/talos-go/talos/internal/machined/system/runner"
)

// ImageCacheServiceID is the supervisor ID of the image cache import.
const ImageCacheServiceID = "image-cache"

// ImageCache (listed by For only where containerd runs) imports the node image's cache (OCI archives in /usr/share/talos/images) into
// containerd once it is up, in the system and k8s.io namespaces: system services and Kubernetes
// start from these images and nothing is pulled.
func ImageCache(r *runtime.Runtime) *system.Service {
	return &system.Service{
		ID:        ImageCacheServiceID,
		DependsOn: []string{ContainerdServiceID},
		Restart:   system.RestartOnFailure,
		Runner: func() (system.Runner, error) {
			out, err := r.Logs.Writer(ImageCacheServiceID)
			if err != nil {
				return nil, err
			}

			socket := NewContainerdPaths(r.Paths).Socket

			return &runner.Goroutine{Name: ImageCacheServiceID, Output: out, Main: func(ctx context.Context, w io.Writer) error {
				_, err := ImportImageCache(ctx, socket, imager.ImageCacheDir, w)

				return err
			}}, nil
		},
	}
}

// ImportImageCache imports every archive of dir into the k8s.io and system namespaces and
// returns the image names.
func ImportImageCache(ctx context.Context, socket, dir string, log io.Writer) ([]string, error) {
	archives, err := filepath.Glob(filepath.Join(dir, "*.tar"))
	if err != nil {
		return nil, err
	}

	if len(archives) == 0 {
		fmt.Fprintf(log, "image cache %s is empty\n", dir)

		return nil, nil
	}

	client, err := containerd.New(socket)
	if err != nil {
		return nil, err
	}
	defer client.Close()

	var names, failed []string

	// Archive by archive, k8s.io before system: kubelet starts once its own image is in the
	// system namespace, and by then the pods' images (pause among them) are in k8s.io, so its
	// first pod sandboxes do not try a registry and back off. The archive is read once; the
	// system namespace gets the same blobs by digest.
	for _, a := range archives {
		start := time.Now()

		imported, err := runner.ImportArchive(namespaces.WithNamespace(ctx, "k8s.io"), client, a)
		if err != nil {
			failed = append(failed, err.Error())

			continue
		}

		fmt.Fprintf(log, "imported %v into k8s.io from %s in %s\n", imported, a, time.Since(start).Round(time.Millisecond))

		start = time.Now()

		if err = runner.CopyImages(ctx, client, "k8s.io", runner.SystemNamespace, imported); err != nil {
			fmt.Fprintf(log, "sharing %s's images with %s: %v; importing it again\n", a, runner.SystemNamespace, err)

			if imported, err = runner.ImportArchive(namespaces.WithNamespace(ctx, runner.SystemNamespace), client, a); err != nil {
				failed = append(failed, err.Error())

				continue
			}
		}

		fmt.Fprintf(log, "added them to %s in %s\n", runner.SystemNamespace, time.Since(start).Round(time.Millisecond))

		names = append(names, imported...)
	}

	if len(failed) > 0 {
		return names, fmt.Errorf("image cache: %w", errors.New(fmt.Sprint(failed)))
	}

	return names, nil
}
