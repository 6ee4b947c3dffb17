// Command e2eimages makes the container images Kubernetes' conformance tests run (agnhost,
// busybox, nginx, httpd, pause, ...) from folders staged on this machine, under their upstream
// names, and pushes them to a cluster's registry (talosctl cluster create --with-registry),
// whose mirror the nodes pull every registry through. hack/e2e-images.sh stages the folders
// (Go builds and Debian packages) and runs it; docs/conformance.md says which image is built
// from what.
//
// Usage:
//
//	go run ./hack/e2eimages build -spec SPEC.json -out ARCHIVE
//	go run ./hack/e2eimages push -archive ARCHIVE -registry HOST:PORT -ca CA.crt -users users.json
//
// SPEC.json is a list of images: {"ref", "base", "root", "entrypoint", "cmd", "env", "user",
// "workdir"}; base and root are folders whose trees become the image's two layers (base, shared
// by the images naming the same folder, is stored once). build writes one docker-format archive
// of them all and prints each image's size. push pushes every image of the archive to the
// registry under the same repository and tag (registry.k8s.io/e2e-test-images/agnhost:2.56 as
// HOST:PORT/e2e-test-images/agnhost:2.56): a node whose mirror for "*" is the registry asks it
// for exactly that.
package main

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/talos-go/talos/internal/imager"
	"github.com/talos-go/talos/internal/registry"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "e2eimages:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	if len(args) == 0 {
		return errors.New("name a command: build or push")
	}

	switch args[0] {
	case "build":
		return build(args[1:], out)
	case "push":
		return push(ctx, args[1:], out)
	}

	return fmt.Errorf("unknown command %q: use build or push", args[0])
}

// spec is one image of SPEC.json.
type spec struct {
	Ref        string   `json:"ref"`
	Base       string   `json:"base"`
	Root       string   `json:"root"`
	Entrypoint []string `json:"entrypoint"`
	Cmd        []string `json:"cmd"`
	Env        []string `json:"env"`
	User       string   `json:"user"`
	WorkDir    string   `json:"workdir"`
}

func build(args []string, out io.Writer) error {
	fl := flag.NewFlagSet("build", flag.ContinueOnError)
	specFile := fl.String("spec", "", "the images (JSON)")
	archive := fl.String("out", "", "the archive to write")

	if err := fl.Parse(args); err != nil {
		return err
	}

	if *specFile == "" || *archive == "" {
		return errors.New("build: give -spec and -out")
	}

	data, err := os.ReadFile(*specFile)
	if err != nil {
		return err
	}

	var list []spec
	if err = json.Unmarshal(data, &list); err != nil {
		return fmt.Errorf("-spec %s: %w", *specFile, err)
	}

	trees := map[string][]imager.ImageFile{} // a base shared by several images is walked once
	tree := func(dir string) ([]imager.ImageFile, error) {
		if dir == "" {
			return nil, nil
		}

		if t, ok := trees[dir]; ok {
			return t, nil
		}

		t, err := walk(dir)
		trees[dir] = t

		return t, err
	}

	specs := make([]imager.ImageSpec, 0, len(list))

	for _, s := range list {
		if s.Ref == "" || s.Root == "" {
			return fmt.Errorf("-spec %s: every image needs a ref and a root folder", *specFile)
		}

		base, err := tree(s.Base)
		if err != nil {
			return fmt.Errorf("%s: base: %w", s.Ref, err)
		}

		files, err := tree(s.Root)
		if err != nil {
			return fmt.Errorf("%s: root: %w", s.Ref, err)
		}

		specs = append(specs, imager.ImageSpec{Ref: s.Ref, Base: base, Files: files, Entrypoint: s.Entrypoint,
			Cmd: s.Cmd, Env: s.Env, User: s.User, WorkingDir: s.WorkDir})
	}

	sizes, err := imager.WriteImagesArchive(*archive, specs...)
	if err != nil {
		return err
	}

	for _, s := range specs {
		fmt.Fprintf(out, "%s\t%.1f MB\n", s.Ref, float64(sizes[s.Ref])/1e6)
	}

	return nil
}

// walk lists dir's tree as image files: folders, symlinks as they are, regular files with
// their permission bits, setuid, setgid and sticky included (nonewprivs' program is setuid root).
func walk(dir string) ([]imager.ImageFile, error) {
	var files []imager.ImageFile

	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}

		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}

		info, err := d.Info()
		if err != nil {
			return err
		}

		mode := int64(info.Mode().Perm())
		if info.Mode()&fs.ModeSetuid != 0 {
			mode |= 0o4000
		}

		if info.Mode()&fs.ModeSetgid != 0 {
			mode |= 0o2000
		}

		if info.Mode()&fs.ModeSticky != 0 {
			mode |= 0o1000 // /tmp
		}

		f := imager.ImageFile{Path: "/" + filepath.ToSlash(rel), Mode: mode}

		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			if f.Link, err = os.Readlink(p); err != nil {
				return err
			}
		case info.Mode().IsRegular():
			f.Source = p
		case !info.IsDir():
			return fmt.Errorf("%s: only folders, files and symlinks go into an image", p)
		}

		files = append(files, f)

		return nil
	})

	return files, err
}

func push(ctx context.Context, args []string, out io.Writer) error {
	fl := flag.NewFlagSet("push", flag.ContinueOnError)
	archive := fl.String("archive", "", "the archive build wrote")
	host := fl.String("registry", "", "the registry, host:port")
	caFile := fl.String("ca", "", "the CA its certificate is signed by (the cluster folder's registry/ca.crt)")
	usersFile := fl.String("users", "", "its users (the cluster folder's registry/users.json); the first one pushes")

	if err := fl.Parse(args); err != nil {
		return err
	}

	if *archive == "" || *host == "" {
		return errors.New("push: give -archive and -registry")
	}

	c := registry.Client{}

	if *caFile != "" {
		ca, err := os.ReadFile(*caFile)
		if err != nil {
			return err
		}

		c.CA = ca
	}

	if *usersFile != "" {
		data, err := os.ReadFile(*usersFile)
		if err != nil {
			return err
		}

		users := map[string]string{}
		if err = json.Unmarshal(data, &users); err != nil {
			return fmt.Errorf("-users %s: %w", *usersFile, err)
		}

		names := make([]string, 0, len(users))
		for u := range users {
			names = append(names, u)
		}

		sort.Strings(names)

		if len(names) > 0 {
			c.Username, c.Password = names[0], users[names[0]]
		}
	}

	tags, err := archiveTags(*archive)
	if err != nil {
		return err
	}

	for _, t := range tags {
		img, err := registry.ImageFromTar(*archive, t)
		if err != nil {
			return fmt.Errorf("%s in %s: %w", t, *archive, err)
		}

		tag, err := name.NewTag(t)
		if err != nil {
			return err
		}

		dest := *host + "/" + tag.RepositoryStr() + ":" + tag.TagStr()
		if err = c.Push(ctx, dest, img); err != nil {
			return err
		}

		fmt.Fprintf(out, "pushed %s as %s\n", t, dest)
	}

	return nil
}

// archiveTags reads the image names of a docker-format archive's manifest.json.
func archiveTags(archive string) ([]string, error) {
	f, err := os.Open(archive)
	if err != nil {
		return nil, err
	}
	defer f.Close()

	tr := tar.NewReader(f)

	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s has no manifest.json: not a docker-format archive", archive)
		}

		if err != nil {
			return nil, err
		}

		if hdr.Name != "manifest.json" {
			continue
		}

		var manifest []struct{ RepoTags []string }
		if err = json.NewDecoder(tr).Decode(&manifest); err != nil {
			return nil, fmt.Errorf("%s: manifest.json: %w", archive, err)
		}

		var tags []string
		for _, m := range manifest {
			tags = append(tags, m.RepoTags...)
		}

		return tags, nil
	}
}
