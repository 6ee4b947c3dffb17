package imager

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/talos-go/talos/internal/images"
)

// imageChecks are programs run chrooted into each image's files: the binary says its version,
// and what it execs runs with the image's own libraries.
var imageChecks = map[string][]chrootCheck{
	images.KubeAPIServer:         {{argv: []string{images.KubeBinDir + "/kube-apiserver", "--version"}, want: "Kubernetes " + images.KubernetesVersion}},
	images.KubeControllerManager: {{argv: []string{images.KubeBinDir + "/kube-controller-manager", "--version"}, want: "Kubernetes " + images.KubernetesVersion}},
	images.KubeScheduler:         {{argv: []string{images.KubeBinDir + "/kube-scheduler", "--version"}, want: "Kubernetes " + images.KubernetesVersion}},
	images.KubeProxy: {
		{argv: []string{images.KubeBinDir + "/kube-proxy", "--version"}, want: "Kubernetes " + images.KubernetesVersion},
		{argv: []string{"/usr/sbin/iptables", "--version"}, want: "nf_tables"},
		{argv: []string{"/usr/sbin/ip6tables-legacy", "--version"}, want: "legacy"},
		{argv: []string{"/usr/sbin/nft", "--version"}, want: "nftables"},
	},
	images.Kubelet: {
		{argv: []string{images.KubeBinDir + "/kubelet", "--version"}, want: "Kubernetes " + images.KubernetesVersion},
		{argv: []string{"/usr/bin/mount", "--version"}, want: "util-linux"},
	},
	images.CoreDNS: {{argv: []string{images.CoreDNSPath, "-version"}, want: "CoreDNS-" + strings.TrimPrefix(images.CoreDNSVersion, "v")}},
	images.Flannel: {
		{argv: []string{images.FlanneldPath, "--version"}, want: images.FlannelVersion},
		{argv: []string{"/usr/sbin/iptables", "-m", "conntrack", "-h"}, want: "ctstate"},
		{argv: []string{"/usr/bin/cp", "--version"}, want: "coreutils"},
	},
	images.Pause: {{argv: []string{images.PausePath, "-v"}, want: "pause"}},
	images.Etcd:  {{argv: []string{images.EtcdPath, "--version"}, want: "etcd Version"}},
}

// checkImages writes each image's files to a folder and runs its checks there.
func checkImages(ctx context.Context, specs []ImageSpec, tmp string, progress io.Writer) error {
	for _, s := range specs {
		checks, ok := imageChecks[s.Ref]
		if !ok {
			return fmt.Errorf("image %s has no checks", s.Ref)
		}

		t := NewTree()

		for _, f := range append(append([]ImageFile{}, s.Base...), s.Files...) {
			var err error

			switch {
			case f.Link != "":
				err = t.Symlink(f.Path, f.Link)
			case f.Source != "" && f.Mode == 0:
				err = t.File(f.Path, f.Source, 0o755)
			case f.Source != "":
				err = t.File(f.Path, f.Source, os.FileMode(f.Mode))
			default:
				err = t.Dir(f.Path, 0o755)
			}

			if err != nil {
				return fmt.Errorf("image %s: %w", s.Ref, err)
			}
		}

		root, err := os.MkdirTemp(tmp, ".image-check-")
		if err != nil {
			return err
		}

		err = t.WriteTo(filepath.Join(root, "root"))
		if err == nil {
			err = runChecks(ctx, filepath.Join(root, "root"), checks, progress)
		}

		os.RemoveAll(root)

		if err != nil {
			return fmt.Errorf("image %s: %w", s.Ref, err)
		}
	}

	return nil
}
