package runner

import (
	"context"
	"fmt"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// CopyImages makes the images named, already in namespace from, images of namespace to as
// well, without reading their data again: containerd keeps one copy of each blob for every
// namespace (its default "shared" content policy), so a blob another namespace has is added to
// this one by its digest alone, with the labels that keep it from garbage collection. An
// import of the same archive would write and sync every byte a second time.
func CopyImages(ctx context.Context, client *containerd.Client, from, to string, names []string) error {
	src, dst := namespaces.WithNamespace(ctx, from), namespaces.WithNamespace(ctx, to)
	store, is := client.ContentStore(), client.ImageService()

	// Under a lease until the images exist: a blob committed here is referenced by nothing in
	// this namespace until its manifest and image are, and garbage collection (which any
	// deletion in any namespace schedules) would take it meanwhile.
	dst, done, err := client.WithLease(dst)
	if err != nil {
		return fmt.Errorf("lease in %s: %w", to, err)
	}

	defer done(context.WithoutCancel(dst)) //nolint:errcheck // an expired lease goes by itself

	for _, name := range names {
		img, err := is.Get(src, name)
		if err != nil {
			return fmt.Errorf("image %s in %s: %w", name, from, err)
		}

		// Children first, so every blob a label points to is there when the label is.
		var blobs []ocispec.Descriptor

		if err = images.Walk(src, images.HandlerFunc(func(ctx context.Context, desc ocispec.Descriptor) ([]ocispec.Descriptor, error) {
			blobs = append(blobs, desc)

			return images.Children(ctx, store, desc)
		}), img.Target); err != nil {
			return fmt.Errorf("image %s in %s: %w", name, from, err)
		}

		for i := len(blobs) - 1; i >= 0; i-- {
			if err = shareBlob(src, dst, store, blobs[i]); err != nil {
				return fmt.Errorf("image %s: blob %s: %w", name, blobs[i].Digest, err)
			}
		}

		img.CreatedAt, img.UpdatedAt = img.CreatedAt.UTC(), img.UpdatedAt.UTC()

		if _, err = is.Create(dst, img); errdefs.IsAlreadyExists(err) {
			_, err = is.Update(dst, img)
		}

		if err != nil {
			return fmt.Errorf("image %s in %s: %w", name, to, err)
		}
	}

	return nil
}

// shareBlob commits a blob of namespace src to namespace dst by its digest, with its labels.
func shareBlob(src, dst context.Context, store content.Store, desc ocispec.Descriptor) error {
	info, err := store.Info(src, desc.Digest)
	if err != nil {
		return err
	}

	w, err := content.OpenWriter(dst, store, content.WithRef("share-"+desc.Digest.String()), content.WithDescriptor(desc))
	if errdefs.IsAlreadyExists(err) {
		_, err = store.Update(dst, content.Info{Digest: desc.Digest, Labels: info.Labels}, labelFields(info.Labels)...)

		return err
	}

	if err != nil {
		return err
	}
	defer w.Close()

	// A shared blob commits with no data written; were content not shared between namespaces,
	// the commit would fail on its size and the caller imports the archive instead.
	if err = w.Commit(dst, desc.Size, desc.Digest, content.WithLabels(info.Labels)); err != nil && !errdefs.IsAlreadyExists(err) {
		return err
	}

	return nil
}

func labelFields(labels map[string]string) []string {
	fields := make([]string, 0, len(labels))
	for k := range labels {
		fields = append(fields, "labels."+k)
	}

	return fields
}
