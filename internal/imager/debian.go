package imager

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// Userland is the C userland Kubernetes networking needs, staged from the host's Debian
// packages with exactly the shared libraries their binaries and plugins load.
type Userland struct {
	// Packages whose programs and plugins are staged (from `dpkg -L`): ELF files and symlinks
	// under /usr/bin, /usr/sbin and /usr/lib; documentation, configuration and scripts are not.
	Packages []string
	// Links are the names Debian's alternatives would manage, made plain symlinks here.
	Links map[string]string
	// Programs, when set, are the only programs taken from the packages (merged-/usr paths,
	// e.g. /usr/bin/cp), with their libraries.
	Programs []string
	// Dlopened are libraries (sonames) the programs load at run time, which their ELF headers
	// do not name: glibc loads libgcc_s.so.1 when a thread exits, say.
	Dlopened []string
}

// DebianUserland is what the node image carries: iptables (nft and legacy backends, the
// default being nft) and nftables.
var DebianUserland = Userland{
	Packages: []string{"iptables", "nftables"},
	Links: map[string]string{
		"/usr/sbin/iptables":          "iptables-nft",
		"/usr/sbin/iptables-save":     "iptables-nft-save",
		"/usr/sbin/iptables-restore":  "iptables-nft-restore",
		"/usr/sbin/ip6tables":         "ip6tables-nft",
		"/usr/sbin/ip6tables-save":    "ip6tables-nft-save",
		"/usr/sbin/ip6tables-restore": "ip6tables-nft-restore",
		"/usr/sbin/ebtables":          "ebtables-nft",
		"/usr/sbin/arptables":         "arptables-nft",
	},
}

// Stage adds the userland to the tree and returns the ELF files it added (programs, plugins and
// libraries), for the chroot check.
func (u Userland) Stage(ctx context.Context, t *Tree) (programs []string, err error) {
	var elfs []string // host paths

	for _, pkg := range u.Packages {
		files, err := dpkgFiles(ctx, pkg)
		if err != nil {
			return nil, err
		}

		for _, f := range files {
			dst := mergedUsr(f)
			if !stagedFromPackage(dst) || (len(u.Programs) > 0 && !slices.Contains(u.Programs, dst)) {
				continue
			}

			fi, err := os.Lstat(f)
			if err != nil {
				return nil, fmt.Errorf("package %s lists %s: %w", pkg, f, err)
			}

			switch {
			case fi.Mode()&os.ModeSymlink != 0:
				target, err := os.Readlink(f)
				if err != nil {
					return nil, err
				}

				if path.IsAbs(target) {
					// Absolute links point into /etc/alternatives; Links names those.
					continue
				}

				err = t.Symlink(dst, target)
				if err != nil {
					return nil, err
				}
			case fi.Mode().IsRegular() && isELF(f):
				if err = t.File(dst, f, 0o755); err != nil {
					return nil, err
				}

				elfs = append(elfs, f)

				if strings.HasPrefix(dst, "/usr/bin/") || strings.HasPrefix(dst, "/usr/sbin/") {
					programs = append(programs, dst)
				}
			}
		}
	}

	for _, p := range u.Programs {
		if !t.Has(p) {
			return nil, fmt.Errorf("userland program %s is in none of the packages %v", p, u.Packages)
		}
	}

	for _, link := range sortedKeys(u.Links) {
		if !t.Has(path.Join(path.Dir(link), u.Links[link])) {
			return nil, fmt.Errorf("userland link %s points to %s, which the packages %v do not hold", link, u.Links[link], u.Packages)
		}

		if err = t.Symlink(link, u.Links[link]); err != nil {
			return nil, err
		}
	}

	for _, name := range u.Dlopened {
		lib, err := findLibrary(name)
		if err != nil {
			return nil, fmt.Errorf("userland library loaded at run time: %w", err)
		}

		elfs = append(elfs, lib)
	}

	libs, err := sharedLibraries(elfs)
	if err != nil {
		return nil, err
	}

	for _, lib := range u.Dlopened {
		found, _ := findLibrary(lib) // found above
		libs = append(libs, found)
	}

	for _, lib := range libs {
		real, err := filepath.EvalSymlinks(lib)
		if err != nil {
			return nil, err
		}

		// The library goes in under the name the loader looks for (its soname path).
		if err = t.File(mergedUsr(lib), real, 0o755); err != nil {
			return nil, err
		}
	}

	return programs, nil
}

// DiskUserland is what a metal node formats its partitions with when it installs: mkfs.xfs,
// mkfs.fat for the EFI partition and cryptsetup for encrypted volumes (which the boot stage
// runs from the node image too).
var DiskUserland = Userland{
	Packages: []string{"xfsprogs", "dosfstools", "cryptsetup-bin"},
	Programs: []string{"/usr/sbin/mkfs.xfs", "/usr/sbin/mkfs.fat", "/usr/sbin/cryptsetup"},
	Dlopened: []string{"libgcc_s.so.1"}, // cryptsetup's argon2 threads
}

// stagedFromPackage tells which of a package's files the image takes.
func stagedFromPackage(p string) bool {
	for _, dir := range []string{"/usr/bin/", "/usr/sbin/", "/usr/lib/"} {
		if strings.HasPrefix(p, dir) && !strings.HasPrefix(p, "/usr/lib/systemd/") {
			return true
		}
	}

	return false
}

// mergedUsr maps a host path to the image's merged-/usr layout (/lib, /bin, /sbin, /lib64 are
// links into /usr).
func mergedUsr(p string) string {
	for _, dir := range []string{"/lib64/", "/lib/", "/bin/", "/sbin/"} {
		if strings.HasPrefix(p, dir) {
			return "/usr" + p
		}
	}

	return p
}

func dpkgFiles(ctx context.Context, pkg string) ([]string, error) {
	out, err := exec.CommandContext(ctx, "dpkg", "-L", pkg).Output()
	if err != nil {
		return nil, fmt.Errorf("listing Debian package %s (install it: apt-get install %s): %w", pkg, pkg, err)
	}

	var files []string

	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if f := strings.TrimSpace(sc.Text()); strings.HasPrefix(f, "/") {
			files = append(files, f)
		}
	}

	slices.Sort(files)

	return files, nil
}

// libraryDirs are where Debian's loader finds libraries on amd64 without an ld.so.cache: the
// multiarch folders first, as ld.so's built-in search list has them.
var libraryDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"}

// sharedLibraries returns, sorted, every shared library and dynamic loader the given ELF files
// load: their DT_NEEDED entries, resolved in libraryDirs as ld.so does, and theirs in turn. It
// reads the files rather than running ldd on each (ldd executes every file through the loader,
// a second or more per file on a busy machine); the chroot check then proves the set complete,
// and a test compares it with ldd.
func sharedLibraries(elfs []string) ([]string, error) {
	found := map[string]bool{}
	loaders := map[string]string{} // soname -> path: libc names the loader, which is loaded already

	// The loaders first, so a library that names one by its soname gets the same file.
	for _, file := range elfs {
		interp, _, err := elfNeeds(file)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", file, err)
		}

		if interp != "" {
			loaders[path.Base(interp)] = interp
			found[interp] = true
		}
	}

	queue := slices.Clone(elfs)

	for len(queue) > 0 {
		file := queue[0]
		queue = queue[1:]

		_, needed, err := elfNeeds(file)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", file, err)
		}

		for _, name := range needed {
			lib, ok := loaders[name]
			if !ok {
				if lib, err = findLibrary(name); err != nil {
					return nil, fmt.Errorf("%s needs %w", file, err)
				}
			}

			if !found[lib] {
				found[lib] = true
				queue = append(queue, lib)
			}
		}
	}

	return sortedKeys(found), nil
}

// elfNeeds returns a file's loader (PT_INTERP) and its DT_NEEDED names.
func elfNeeds(file string) (string, []string, error) {
	f, err := elf.Open(file)
	if err != nil {
		return "", nil, err
	}
	defer f.Close()

	interp := ""

	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			data := make([]byte, p.Filesz)
			if _, err = p.ReadAt(data, 0); err != nil {
				return "", nil, err
			}

			interp = strings.TrimRight(string(data), "\x00")
		}
	}

	if rpath, _ := f.DynString(elf.DT_RUNPATH); len(rpath) > 0 {
		return "", nil, fmt.Errorf("it has a RUNPATH %v, which the image's layout does not follow", rpath)
	}

	libs, err := f.ImportedLibraries()

	return interp, libs, err
}

func findLibrary(name string) (string, error) {
	for _, dir := range libraryDirs {
		p := path.Join(dir, name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}

	return "", fmt.Errorf("%s, which is in none of %v", name, libraryDirs)
}

func isELF(p string) bool {
	f, err := elf.Open(p)
	if err != nil {
		return false
	}

	f.Close()

	return true
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}

	slices.Sort(keys)

	return keys
}
