package imager

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

func TestParsePlatforms(t *testing.T) {
	got, err := ParsePlatforms([]string{"gcp,openstack", " nocloud ", "metal", "gcp"})
	if err != nil || !slices.Equal(got, []string{"nocloud", "openstack", "gcp"}) {
		t.Fatalf("got %v, %v: want nocloud, openstack, gcp (platform.Known's order, metal left out, once each)", got, err)
	}

	if got, err = ParsePlatforms([]string{"all"}); err != nil || len(got) != 5 {
		t.Fatalf("all: %v, %v: want the five platforms besides metal", got, err)
	}

	for _, name := range got {
		if PlatformImageName(name) == "" || !strings.HasPrefix(PlatformImageName(name), name+"-amd64.") {
			t.Errorf("%s: image name %q is not upstream's <platform>-amd64.<format>", name, PlatformImageName(name))
		}
	}

	if _, err = ParsePlatforms([]string{"nocloud,vmware"}); err == nil || !strings.Contains(err.Error(), `"vmware"`) || !strings.Contains(err.Error(), "azure") {
		t.Fatalf("an unknown platform: %v, want it named and the known ones listed", err)
	}
}

// smallRaw writes a 4 MiB raw disk with data at its start and at 3 MiB, holes between.
func smallRaw(t *testing.T) (string, []byte) {
	t.Helper()

	raw := filepath.Join(t.TempDir(), "disk.raw")
	want := make([]byte, 4<<20)
	copy(want, "a disk's first sector")
	copy(want[3<<20:], "data after a hole")

	if err := os.WriteFile(raw, want, 0o600); err != nil {
		t.Fatal(err)
	}

	return raw, want
}

// qemuImgInfo is qemu-img info's format and virtual size of file (args: qemu-img's own, such as
// -f vpc, as a fixed VHD has no header to probe: its footer is at its end).
func qemuImgInfo(t *testing.T, file string, args ...string) (format string, size int64) {
	t.Helper()

	b, err := exec.Command("qemu-img", append(append([]string{"info", "--output=json"}, args...), file)...).Output()
	if err != nil {
		t.Fatalf("qemu-img info %s: %v", file, err)
	}

	var info struct {
		Format      string `json:"format"`
		VirtualSize int64  `json:"virtual-size"`
	}
	if err = json.Unmarshal(b, &info); err != nil {
		t.Fatal(err)
	}

	return info.Format, info.VirtualSize
}

func TestConvertDiskImage(t *testing.T) {
	if _, err := exec.LookPath("qemu-img"); err != nil {
		t.Skip("no qemu-img: apt-get install qemu-utils")
	}

	raw, want := smallRaw(t)
	dir := t.TempDir()

	qcow2 := filepath.Join(dir, "openstack-amd64.qcow2")
	if err := convertDiskImage(raw, FormatQCOW2, qcow2); err != nil {
		t.Fatal(err)
	}

	if format, size := qemuImgInfo(t, qcow2); format != "qcow2" || size != int64(len(want)) {
		t.Errorf("qcow2: qemu-img info says %s of %d bytes, want qcow2 of %d", format, size, len(want))
	}

	vhd := filepath.Join(dir, "azure-amd64.vhd")
	if err := convertDiskImage(raw, FormatVHD, vhd); err != nil {
		t.Fatal(err)
	}

	if format, size := qemuImgInfo(t, vhd, "-f", "vpc"); format != "vpc" || size != int64(len(want)) {
		t.Errorf("vhd: qemu-img info says %s of %d bytes, want vpc of %d (force_size)", format, size, len(want))
	}

	// A fixed VHD is the raw disk and a 512-byte footer: cookie "conectix", disk type 2 (fixed)
	// at 60, the current size at 48.
	b, err := os.ReadFile(vhd)
	if err != nil {
		t.Fatal(err)
	}

	if len(b) != len(want)+512 || !bytes.Equal(b[:len(want)], want) {
		t.Fatalf("vhd: %d bytes, want the raw disk's %d and a footer", len(b), len(want))
	}

	footer := b[len(want):]
	if string(footer[:8]) != "conectix" || binary.BigEndian.Uint32(footer[60:]) != 2 || binary.BigEndian.Uint64(footer[48:]) != uint64(len(want)) {
		t.Errorf("vhd footer: cookie %q, type %d, size %d: want conectix, 2 (fixed), %d", footer[:8], binary.BigEndian.Uint32(footer[60:]), binary.BigEndian.Uint64(footer[48:]), len(want))
	}

	// Azure refuses a size that is not a whole MiB.
	odd := filepath.Join(dir, "odd.raw")
	if err = os.WriteFile(odd, want[:len(want)-512], 0o600); err != nil {
		t.Fatal(err)
	}

	if err = convertDiskImage(odd, FormatVHD, filepath.Join(dir, "odd.vhd")); err == nil || !strings.Contains(err.Error(), "whole MiB") {
		t.Errorf("a VHD of a size not a whole MiB: %v, want refused", err)
	}

	if err = convertDiskImage(raw, "vmdk", filepath.Join(dir, "x.vmdk")); err == nil || !strings.Contains(err.Error(), "qcow2") {
		t.Errorf("an unknown format: %v, want refused with the formats listed", err)
	}
}

func TestTarGZHoldsDiskRaw(t *testing.T) {
	raw, want := smallRaw(t)
	out := filepath.Join(t.TempDir(), "gcp-amd64.raw.tar.gz")

	if err := convertDiskImage(raw, FormatTarGZ, out); err != nil {
		t.Fatal(err)
	}

	read := func() []byte {
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}

		return b
	}

	first := read()

	zr, err := gzip.NewReader(bytes.NewReader(first))
	if err != nil {
		t.Fatal(err)
	}

	tr := tar.NewReader(zr)

	hdr, err := tr.Next()
	if err != nil {
		t.Fatal(err)
	}

	got, err := io.ReadAll(tr)
	if err != nil {
		t.Fatal(err)
	}

	if hdr.Name != "disk.raw" || !bytes.Equal(got, want) {
		t.Errorf("the tarball holds %q, %d bytes: want disk.raw, the raw disk's %d", hdr.Name, len(got), len(want))
	}

	if _, err = tr.Next(); !errors.Is(err, io.EOF) {
		t.Errorf("the tarball holds more than disk.raw: %v", err)
	}

	// The same disk gives the same bytes.
	if err = convertDiskImage(raw, FormatTarGZ, out); err != nil {
		t.Fatal(err)
	}

	if !bytes.Equal(first, read()) {
		t.Errorf("the tarball changed between two runs on the same disk")
	}
}

// A compressed disk image is zstd's (upstream's .zst), decompresses to the image's bytes, holes
// included, and leaves the image where it was.
func TestCompressZstd(t *testing.T) {
	raw, want := smallRaw(t)

	out, size, err := compressZstd(raw)
	if err != nil {
		t.Fatal(err)
	}

	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}

	if out != raw+".zst" || int64(len(b)) != size || size >= int64(len(want)) {
		t.Errorf("wrote %s, %d bytes (said %d) for %d", out, len(b), size, len(want))
	}

	zr, err := zstd.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()

	got, err := io.ReadAll(zr)
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("decompressed %d bytes (%v), not the image's %d", len(got), err, len(want))
	}

	if _, err = os.Stat(raw); err != nil {
		t.Errorf("the image is gone: %v", err)
	}
}
