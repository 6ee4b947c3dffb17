package imager

import (
	"fmt"
	"os"
)

// CABundle is where Debian's ca-certificates keeps the bundle the image carries.
const CABundle = "/etc/ssl/certs/ca-certificates.crt"

// layout is the image's skeleton: mount points, the merged /usr links and the folders the
// services expect.
func layout(t *Tree) error {
	for _, d := range []struct {
		path string
		perm os.FileMode
	}{
		// Mount points: tmpfs for these, overlay for /var (machined makes them at boot).
		{"/dev", 0o755}, {"/proc", 0o555}, {"/sys", 0o555}, {"/run", 0o755}, {"/system", 0o755},
		{"/tmp", os.ModeSticky | 0o777}, {"/var", 0o755},
		{"/etc", 0o755}, {"/root", 0o700},
		{"/usr/bin", 0o755}, {"/usr/sbin", 0o755}, {"/usr/lib", 0o755}, {"/usr/lib64", 0o755},
		{"/opt/cni/bin", 0o755}, {"/etc/cni/net.d", 0o755}, {ImageCacheDir, 0o755},
		// kube-proxy mounts /lib/modules (empty here: the node loads no modules itself).
		{"/usr/lib/modules", 0o755},
		// Writable through overlays on EPHEMERAL at boot, as upstream (kubelet and the CNI write there).
		{"/etc/kubernetes", 0o755}, {"/usr/libexec/kubernetes", 0o755},
	} {
		if err := t.Dir(d.path, d.perm); err != nil {
			return err
		}
	}

	for link, target := range map[string]string{
		"/bin": "usr/bin", "/sbin": "usr/sbin", "/lib": "usr/lib", "/lib64": "usr/lib64",
		"/etc/mtab": "../proc/self/mounts",
	} {
		if err := t.Symlink(link, target); err != nil {
			return err
		}
	}

	return nil
}

// ImageCacheDir holds OCI archives that containerd imports at boot.
const ImageCacheDir = "/usr/share/talos/images"

// etcFiles adds /etc: identity, name service, users and placeholders that machined mounts its
// own files over (hosts, resolv.conf, hostname, machine-id) at boot.
func etcFiles(t *Tree, version string) error {
	files := []struct {
		path, data string
	}{
		{"/etc/os-release", fmt.Sprintf("NAME=\"Talos\"\nID=talos\nVERSION_ID=%s\nPRETTY_NAME=\"Talos (%s)\"\n", version, version)},
		{"/etc/hosts", "127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n"},
		{"/etc/resolv.conf", ""},
		{"/etc/hostname", ""},
		{"/etc/machine-id", ""},
		{"/etc/nsswitch.conf", "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\nprotocols: files\nservices: files\n"},
		{"/etc/passwd", "root:x:0:0:root:/root:/usr/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"},
		{"/etc/group", "root:x:0:\nnogroup:x:65534:\n"},
	}

	for _, f := range files {
		if err := t.Data(f.path, []byte(f.data), 0o644); err != nil {
			return err
		}
	}

	// Host files from Debian packages: the CA bundle (ca-certificates) and the protocol and
	// service names iptables and nft resolve (netbase).
	for _, f := range []struct{ path, pkg string }{
		{CABundle, "ca-certificates"}, {"/etc/protocols", "netbase"}, {"/etc/services", "netbase"},
	} {
		real, err := os.Stat(f.path)
		if err != nil || !real.Mode().IsRegular() {
			return fmt.Errorf("%s is missing on this machine: apt-get install %s", f.path, f.pkg)
		}

		if err = t.File(f.path, f.path, 0o644); err != nil {
			return err
		}
	}

	return t.Symlink("/etc/ssl/cert.pem", "certs/ca-certificates.crt")
}
