package imager

import (
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/klauspost/compress/zstd"

	"github.com/talos-go/talos/internal/metal"
	"github.com/talos-go/talos/internal/platform"
)

// Disk image formats, as each platform takes its images.
const (
	FormatRaw   = "raw"
	FormatQCOW2 = "qcow2"  // qemu-img's qcow2: OpenStack's Glance
	FormatVHD   = "vhd"    // a fixed-size VHD (qemu-img's vpc), its size a whole MiB: Azure
	FormatTarGZ = "tar.gz" // disk.raw in a gzip-compressed GNU tar: GCP
)

// platformImage is a platform's disk image: its format and its file's name (upstream's, without
// upstream's .zst, which --compress adds; OpenStack's is qcow2 where upstream's is raw).
type platformImage struct{ format, name string }

var platformImages = map[string]platformImage{
	platform.Metal:     {FormatRaw, DiskImageName},
	platform.Nocloud:   {FormatRaw, "nocloud-amd64.raw"},
	platform.AWS:       {FormatRaw, "aws-amd64.raw"},
	platform.OpenStack: {FormatQCOW2, "openstack-amd64.qcow2"},
	platform.Azure:     {FormatVHD, "azure-amd64.vhd"},
	platform.GCP:       {FormatTarGZ, "gcp-amd64.raw.tar.gz"},
}

// PlatformImageName is the file name of the platform's disk image in the boot assets.
func PlatformImageName(name string) string {
	return platformImages[name].name
}

// ParsePlatforms reads --platform values: platform names, comma-separated or repeated, or
// "all". Metal's image is always built, so it is left out; the rest keep platform.Known's order.
func ParsePlatforms(values []string) ([]string, error) {
	want := map[string]bool{}

	for _, v := range values {
		for name := range strings.SplitSeq(v, ",") {
			name = strings.TrimSpace(name)

			switch {
			case name == "":
			case name == "all":
				for _, k := range platform.Known {
					want[k] = true
				}
			case platformImages[name].name == "":
				return nil, fmt.Errorf("--platform %q: no disk image for it: give one of %s, or all", name, strings.Join(platform.Known, ", "))
			default:
				want[name] = true
			}
		}
	}

	var out []string

	for _, k := range platform.Known {
		if want[k] && k != platform.Metal {
			out = append(out, k)
		}
	}

	return out, nil
}

// buildPlatformImage writes the platform's disk image in outDir: the disk buildDiskImage makes
// with the platform's kernel arguments, converted to the platform's format. It returns the
// image's path.
func buildPlatformImage(in diskImageInputs, name, outDir string) (string, error) {
	img, ok := platformImages[name]
	if !ok {
		return "", fmt.Errorf("no disk image for platform %q", name)
	}

	in.kernelArgs = metal.PlatformKernelArgs(name)
	out := filepath.Join(outDir, img.name)

	if img.format == FormatRaw {
		return out, buildDiskImage(in, out)
	}

	stage, err := os.MkdirTemp(outDir, ".platform-image-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(stage)

	raw := filepath.Join(stage, "disk.raw") // GCP's name for it in the tarball
	if err = buildDiskImage(in, raw); err != nil {
		return "", err
	}

	if err = convertDiskImage(raw, img.format, out); err != nil {
		return "", fmt.Errorf("%s's disk image: %w", name, err)
	}

	return out, nil
}

// convertDiskImage writes the raw disk image in the format at out: qemu-img (Debian's
// qemu-utils) for qcow2 and VHD, GNU tar (sparse) and gzip for the tarball.
func convertDiskImage(raw, format, out string) error {
	tmp := out + ".tmp"
	defer os.Remove(tmp)

	switch format {
	case FormatQCOW2, FormatVHD:
		if _, err := exec.LookPath("qemu-img"); err != nil {
			return fmt.Errorf("no qemu-img to convert the disk image to %s: install Debian's qemu-utils (apt-get install qemu-utils)", format)
		}

		args := []string{"convert", "-f", "raw", "-O", "qcow2", raw, tmp}
		if format == FormatVHD {
			fi, err := os.Stat(raw)
			if err != nil {
				return err
			}

			// Azure takes a fixed VHD whose size is a whole MiB; force_size keeps the raw size
			// instead of rounding it to VHD's cylinders.
			if fi.Size()%(1<<20) != 0 {
				return fmt.Errorf("the disk image is %d bytes: Azure's VHD must be a whole MiB", fi.Size())
			}

			args = []string{"convert", "-f", "raw", "-O", "vpc", "-o", "subformat=fixed,force_size", raw, tmp}
		}

		if b, err := exec.Command("qemu-img", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("qemu-img %s: %w: %s", strings.Join(args, " "), err, b)
		}
	case FormatTarGZ:
		if err := tarGZ(raw, tmp); err != nil {
			return err
		}
	default:
		return fmt.Errorf("disk image format %q: give one of %s", format, strings.Join([]string{FormatRaw, FormatQCOW2, FormatVHD, FormatTarGZ}, ", "))
	}

	return os.Rename(tmp, out)
}

// tarGZ writes raw as the only file of a gzip-compressed GNU tar at out, named by its base
// name: GNU tar keeps its holes (--sparse), the owner, mode and date fixed so the same disk
// gives the same bytes, and Go's gzip leaves the header's date and name out.
func tarGZ(raw, out string) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()

	zw, err := gzip.NewWriterLevel(f, gzip.BestSpeed)
	if err != nil {
		return err
	}

	var stderr strings.Builder

	cmd := exec.Command("tar", "--format=oldgnu", "--sparse", "--mtime=@0", "--owner=0", "--group=0", "--numeric-owner", "--mode=0644",
		"-C", filepath.Dir(raw), "-cf", "-", filepath.Base(raw))
	cmd.Stdout, cmd.Stderr = zw, &stderr

	if err = cmd.Run(); err != nil {
		return fmt.Errorf("tar (GNU tar): %w: %s", err, stderr.String())
	}

	if err = zw.Close(); err != nil {
		return err
	}

	return f.Close()
}

// ZstdSuffix ends the name of a disk image compressed as upstream ships its images
// (aws-amd64.raw.zst, azure-amd64.vhd.zst, nocloud-amd64.raw.zst, metal-amd64.raw.zst).
const ZstdSuffix = ".zst"

// compressZstd writes path compressed with zstd beside it (path.zst), at zstd's fastest level
// on both cores: the images are mostly the holes of a sparse file, which cost the reading and
// little else. It returns the compressed file's path and size.
func compressZstd(path string) (string, int64, error) {
	in, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer in.Close()

	out := path + ZstdSuffix
	tmp := out + ".tmp"

	f, err := os.Create(tmp)
	if err != nil {
		return "", 0, err
	}
	defer os.Remove(tmp)
	defer f.Close()

	zw, err := zstd.NewWriter(f, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(2))
	if err != nil {
		return "", 0, err
	}

	if _, err = io.Copy(zw, in); err != nil {
		zw.Close()

		return "", 0, fmt.Errorf("compressing %s: %w", path, err)
	}

	if err = zw.Close(); err != nil {
		return "", 0, fmt.Errorf("compressing %s: %w", path, err)
	}

	fi, err := f.Stat()
	if err != nil {
		return "", 0, err
	}

	if err = f.Close(); err != nil {
		return "", 0, err
	}

	return out, fi.Size(), os.Rename(tmp, out)
}
