package talosctl

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/cache"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/spf13/cobra"
)

type imageCacheFlags struct {
	images                []string
	cachePath, layerCache string
	platforms             []string
	insecure, force       bool
}

// imageCacheCreateCmd pulls images into an image cache folder: one docker-format archive per
// image, the form the node image's cache takes (imager's image list; machined imports them
// into containerd at boot).
func imageCacheCreateCmd() *cobra.Command {
	var fl imageCacheFlags

	cmd := &cobra.Command{
		Use:   "cache-create",
		Short: "Create a cache of images in OCI format into a directory",
		Long: `Create a cache of images: each image is pulled from its registry and written as an
archive into --image-cache-path, ready for the node image's image cache.`,
		Example: `talosctl image cache-create --images=ghcr.io/siderolabs/kubelet:v1.34.0 --image-cache-path=/tmp/image-cache`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			refs, err := fl.refs(cmd)
			if err != nil {
				return err
			}

			if len(fl.platforms) != 1 {
				return fmt.Errorf("--platform %v: give one platform (an archive holds one image)", fl.platforms)
			}

			platform, err := v1.ParsePlatform(fl.platforms[0])
			if err != nil {
				return fmt.Errorf("--platform %q: %w", fl.platforms[0], err)
			}

			if err = fl.prepare(); err != nil {
				return err
			}

			for _, ref := range refs {
				path, err := fl.pull(cmd, ref, platform)
				if err != nil {
					return fmt.Errorf("%s: %w", ref, err)
				}

				fmt.Fprintf(cmd.ErrOrStderr(), "%s -> %s\n", ref, path)
			}

			return nil
		},
	}

	f := cmd.Flags()
	f.StringSliceVar(&fl.images, "images", nil, "images to cache (- reads them from stdin, one a line)")
	f.StringVar(&fl.cachePath, "image-cache-path", "", "directory to save the image cache in")
	f.StringVar(&fl.layerCache, "image-layer-cache-path", "", "directory to cache image layers in between runs")
	f.StringSliceVar(&fl.platforms, "platform", []string{"linux/amd64"}, "platform to use for the images")
	f.BoolVar(&fl.insecure, "insecure", false, "allow insecure registries (plain HTTP)")
	f.BoolVar(&fl.force, "force", false, "overwrite existing cache")

	return cmd
}

func (fl imageCacheFlags) refs(cmd *cobra.Command) ([]string, error) {
	if len(fl.images) == 0 {
		return nil, errors.New("--images: name the images to cache (or - to read them from stdin)")
	}

	if len(fl.images) == 1 && fl.images[0] == "-" {
		var refs []string

		sc := bufio.NewScanner(cmd.InOrStdin())
		for sc.Scan() {
			if line := strings.TrimSpace(sc.Text()); line != "" && !strings.HasPrefix(line, "#") {
				refs = append(refs, line)
			}
		}

		return refs, sc.Err()
	}

	return fl.images, nil
}

// prepare makes the cache folder, refusing a non-empty one unless --force.
func (fl imageCacheFlags) prepare() error {
	if fl.cachePath == "" {
		return errors.New("--image-cache-path: name the directory to write the cache to")
	}

	entries, err := os.ReadDir(fl.cachePath)
	if err == nil && len(entries) > 0 && !fl.force {
		return fmt.Errorf("--image-cache-path %s is not empty: use --force to write into it", fl.cachePath)
	}

	return os.MkdirAll(fl.cachePath, 0o755)
}

func (fl imageCacheFlags) pull(cmd *cobra.Command, image string, platform *v1.Platform) (string, error) {
	var opts []name.Option
	if fl.insecure {
		opts = append(opts, name.Insecure)
	}

	ref, err := name.ParseReference(image, opts...)
	if err != nil {
		return "", err
	}

	img, err := remote.Image(ref, remote.WithContext(cmd.Context()), remote.WithPlatform(*platform))
	if err != nil {
		return "", err
	}

	if fl.layerCache != "" {
		img = cache.Image(img, cache.NewFilesystemCache(fl.layerCache))
	}

	tag, ok := ref.(name.Tag)
	if !ok { // a digest reference: the archive still needs a name to import under
		tag = ref.Context().Tag("latest")
	}

	path := filepath.Join(fl.cachePath, archiveName(ref.Name()))

	return path, tarball.WriteToFile(path, tag, img)
}

// archiveName turns an image reference into a file name.
func archiveName(ref string) string {
	return strings.NewReplacer("/", "_", ":", "_", "@", "_").Replace(ref) + ".tar"
}
