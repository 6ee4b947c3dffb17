package upgrade

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"

	"github.com/talos-go/talos/internal/imager"
	"github.com/talos-go/talos/internal/machined/runtime"
	"github.com/talos-go/talos/internal/meta"
	"github.com/talos-go/talos/internal/partition"
	"github.com/talos-go/talos/internal/slots"
)

// metalEnv is newEnv as a metal node installed to a disk: slot A holds a kernel and an
// initramfs, GRUB's menu boots it, and a metal image (kernel and initramfs, signed) is served
// over HTTP beside the process image.
func metalEnv(t *testing.T) (*env, string) {
	t.Helper()

	e := newEnv(t, false)
	e.m.R.Mode = runtime.Mode{Kind: runtime.Metal}
	boot := e.m.R.Paths.Boot()

	os.RemoveAll(filepath.Join(boot, "A"))

	for path, content := range map[string]string{
		filepath.Join(boot, "A", slots.SlotKernel):    "old kernel",
		filepath.Join(boot, "A", slots.SlotInitramfs): "old initramfs",
		slots.GRUBConfigPath(boot):                    partition.GRUBConfig(slots.A, []partition.GRUBSlot{{Name: slots.A}}, "talos.platform=metal"),
	} {
		os.MkdirAll(filepath.Dir(path), 0o700)

		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	dir := t.TempDir()
	files := map[string]string{}

	for name, content := range map[string]string{imager.VmlinuzName: "new kernel", imager.InitramfsName: "new initramfs"} {
		files[name] = filepath.Join(dir, name)
		os.WriteFile(files[name], []byte(content), 0o644)
	}

	priv, err := imager.LoadPrivateKey(filepath.Join(filepath.Dir(e.image), "k.key"))
	if err != nil {
		t.Fatal(err)
	}

	if _, err = imager.BuildFile(filepath.Join(dir, "metal.img"), imager.BuildOptions{Version: "v2.0.0", Key: priv, Files: files}); err != nil {
		t.Fatal(err)
	}

	// The same carrying a schematic: an extra kernel argument and a META value.
	files[imager.SchematicName] = filepath.Join(t.TempDir(), imager.SchematicName)
	os.WriteFile(files[imager.SchematicName], []byte("customization:\n  extraKernelArgs: [talos.test.schematic=1]\n  meta: [{key: 0xa0, value: hello}]\n"), 0o644)

	if _, err = imager.BuildFile(filepath.Join(dir, "schematic.img"), imager.BuildOptions{Version: "v2.0.0", Key: priv, Files: files}); err != nil {
		t.Fatal(err)
	}

	os.Link(e.image, filepath.Join(dir, "process.img"))

	srv := httptest.NewServer(http.FileServer(http.Dir(dir)))
	t.Cleanup(srv.Close)

	return e, srv.URL
}

func grubDefault(t *testing.T, e *env) string {
	t.Helper()

	d, err := slots.GRUBDefault(e.m.R.Paths.Boot())
	if err != nil {
		t.Fatal(err)
	}

	return d
}

// A metal node downloads its image, writes slot B, points GRUB at it and leaves EPHEMERAL's
// wipe to the new slot's initramfs; rollback points GRUB back. What it refuses changes nothing.
func TestMetalUpgradeAndRollback(t *testing.T) {
	e, url := metalEnv(t)
	ctx := context.Background()

	for _, tc := range []struct{ image, want string }{
		{e.image, "a metal node downloads its image"},
		{url + "/process.img", "the image is for process nodes"},
		{url + "/missing.img", "404"},
	} {
		if _, err := e.m.Upgrade(ctx, &machine.UpgradeRequest{Image: tc.image}, "actor"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("upgrade from %s: %v, want %q", tc.image, err, tc.want)
		}
	}

	if slots.KernelSlotInstalled(e.m.R.Paths.Boot(), slots.B) || grubDefault(t, e) != slots.A {
		t.Fatal("a refused upgrade changed BOOT")
	}

	if _, err := e.m.Upgrade(ctx, &machine.UpgradeRequest{Image: url + "/metal.img"}, "actor"); err != nil {
		t.Fatal(err)
	}

	<-e.rec.done

	if data, _ := os.ReadFile(filepath.Join(e.m.R.Paths.Boot(), "B", slots.SlotInitramfs)); string(data) != "new initramfs" {
		t.Fatalf("slot B's initramfs: %q", data)
	}

	v := e.meta(t)
	if grubDefault(t, e) != slots.B || v[meta.BootOnce] != slots.B || v[meta.WipeEphemeral] != "1" {
		t.Fatalf("after the upgrade: GRUB %s, META %v", grubDefault(t, e), v)
	}

	if _, err := os.Stat(filepath.Join(e.root, "EPHEMERAL", "lib", "marker")); err != nil {
		t.Fatal("EPHEMERAL was wiped while in use: the new slot's initramfs wipes it")
	}

	// The next boot tried B, which reported success; then a rollback.
	e.m.Slot = slots.B
	e.rec.done = make(chan struct{})

	store, _ := meta.Open(e.m.R.Paths.Meta())
	if err := store.Set(meta.ActiveSlot, slots.B, meta.BootOnce, ""); err != nil {
		t.Fatal(err)
	}

	if err := e.m.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	if v = e.meta(t); grubDefault(t, e) != slots.A || v[meta.ActiveSlot] != slots.A {
		t.Fatalf("after the rollback: GRUB %s, META %v", grubDefault(t, e), v)
	}
}

// An image carrying a schematic boots its slot with the schematic's extra kernel arguments (in
// its own GRUB entry only) and writes its META values with boot-once.
func TestMetalUpgradeWithSchematic(t *testing.T) {
	e, url := metalEnv(t)

	if _, err := e.m.Upgrade(context.Background(), &machine.UpgradeRequest{Image: url + "/schematic.img"}, "actor"); err != nil {
		t.Fatal(err)
	}

	<-e.rec.done

	v := e.meta(t)
	if v[meta.BootOnce] != slots.B || v[meta.TalosKey(0xa0)] != meta.TalosValue([]byte("hello")) {
		t.Errorf("META after the upgrade: %v", v)
	}

	cfg, _ := os.ReadFile(slots.GRUBConfigPath(e.m.R.Paths.Boot()))
	for _, want := range []string{"linux /A/vmlinuz talos.platform=metal\n", "linux /B/vmlinuz talos.platform=metal talos.test.schematic=1\n"} {
		if !strings.Contains(string(cfg), want) {
			t.Errorf("GRUB's menu has no %q:\n%s", want, cfg)
		}
	}
}
