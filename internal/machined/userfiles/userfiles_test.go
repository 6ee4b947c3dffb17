package userfiles_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pelletier/go-toml/v2"
	"github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/config/container"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/stretchr/testify/require"

	"github.com/talos-go/talos/internal/machined/userfiles"
)

func file(op, path, content string, mode os.FileMode) config.File {
	return &v1alpha1.MachineFile{FileOp: op, FilePath: path, FileContent: content, FilePermissions: v1alpha1.FileMode(mode)}
}

func readMode(t *testing.T, p string) (string, os.FileMode) {
	t.Helper()

	data, err := os.ReadFile(p)
	require.NoError(t, err)

	st, err := os.Stat(p)
	require.NoError(t, err)

	return string(data), st.Mode().Perm()
}

// TestWriteFileOps: create makes a file with its exact mode (the umask does not apply), and
// takes the same file from an earlier boot; overwrite replaces, append adds; each op refuses
// what it cannot do, naming the machine.files index, and the other files are still written.
func TestWriteFileOps(t *testing.T) {
	varDir, criDir := t.TempDir(), t.TempDir()

	require.NoError(t, userfiles.Write([]config.File{
		file("create", "/var/etc/app/conf.ini", "a=1\n", 0o640),
		file("create", "/var/etc/app/log.txt", "first\n", 0o600),
		file("create", "/var/etc/app/old.txt", "old\n", 0o644),
	}, varDir, criDir))

	content, mode := readMode(t, filepath.Join(varDir, "etc/app/conf.ini"))
	require.Equal(t, "a=1\n", content)
	require.Equal(t, os.FileMode(0o640), mode)

	// The next boot with the same config: create finds its own file and is done.
	require.NoError(t, userfiles.Write([]config.File{file("create", "/var/etc/app/conf.ini", "a=1\n", 0o640)}, varDir, criDir))

	err := userfiles.Write([]config.File{
		file("create", "/var/etc/app/conf.ini", "a=2\n", 0o640),
		file("append", "/var/etc/app/log.txt", "second\n", 0o604),
		file("overwrite", "/var/etc/app/old.txt", "new\n", 0o600),
		file("overwrite", "/var/etc/app/missing.txt", "x", 0o600),
		file("append", "/var/etc/app/missing2.txt", "x", 0o600),
	}, varDir, criDir)
	require.Error(t, err)
	require.Contains(t, err.Error(), "machine.files[0] (create /var/etc/app/conf.ini): the file exists and op create makes a new file only: use op overwrite")
	require.Contains(t, err.Error(), "machine.files[3] (overwrite /var/etc/app/missing.txt): the file does not exist")
	require.Contains(t, err.Error(), "machine.files[4] (append /var/etc/app/missing2.txt): the file does not exist")
	require.NotContains(t, err.Error(), "machine.files[1]")
	require.NotContains(t, err.Error(), "machine.files[2]")

	content, _ = readMode(t, filepath.Join(varDir, "etc/app/conf.ini"))
	require.Equal(t, "a=1\n", content, "a refused create leaves the file alone")

	content, mode = readMode(t, filepath.Join(varDir, "etc/app/log.txt"))
	require.Equal(t, "first\nsecond\n", content)
	require.Equal(t, os.FileMode(0o604), mode)

	content, mode = readMode(t, filepath.Join(varDir, "etc/app/old.txt"))
	require.Equal(t, "new\n", content)
	require.Equal(t, os.FileMode(0o600), mode)

	require.NoFileExists(t, filepath.Join(varDir, "etc/app/missing.txt"))
	require.NoFileExists(t, filepath.Join(varDir, "etc/app/missing2.txt"))
}

// TestWriteCRIPart: the CRI part goes to the CRI parts folder, not /var, and goes away with the
// config that had it.
func TestWriteCRIPart(t *testing.T) {
	varDir, criDir := t.TempDir(), t.TempDir()
	part := "[metrics]\n  address = \"0.0.0.0:11234\"\n"

	require.NoError(t, userfiles.Write([]config.File{file("create", userfiles.CRIPart, part, 0o644)}, varDir, criDir))

	data, err := os.ReadFile(filepath.Join(criDir, userfiles.CRIPartName))
	require.NoError(t, err)
	require.Equal(t, part, string(data))

	entries, err := os.ReadDir(varDir)
	require.NoError(t, err)
	require.Empty(t, entries)

	require.NoError(t, userfiles.Write(nil, varDir, criDir))
	require.NoFileExists(t, filepath.Join(criDir, userfiles.CRIPartName))
}

// TestCheckRefusesFilesOutsideVar: only /var and the CRI part are taken; every other path, a
// path with '..', an unknown op and a CRI part that is not TOML are refused naming the field.
func TestCheckRefusesFilesOutsideVar(t *testing.T) {
	require.NoError(t, userfiles.Check([]config.File{
		file("create", "/var/etc/app.conf", "x", 0o644),
		file("append", "/var/lib/x/y", "x", 0o644),
		file("create", userfiles.CRIPart, "[metrics]\naddress = \"0.0.0.0:11234\"\n", 0o644),
	}))

	for _, tc := range []struct {
		f    config.File
		want string
	}{
		{file("create", "/etc/motd", "x", 0o644), `machine.files[0].path "/etc/motd": the root is read-only, files go under /var only`},
		{file("append", "/tmp/file.txt", "x", 0o644), `machine.files[0].path "/tmp/file.txt": the root is read-only`},
		{file("create", "/var", "x", 0o644), `machine.files[0].path "/var": the root is read-only`},
		{file("create", "/etc/cri/conf.d/10-other.part", "x", 0o644), `move the file under /var`},
		{file("create", "/var/../etc/passwd", "x", 0o644), `machine.files[0].path "/var/../etc/passwd": not an absolute clean path`},
		{file("create", "var/x", "x", 0o644), `machine.files[0].path "var/x": not an absolute clean path`},
		{file("create", "", "x", 0o644), `machine.files[0].path: empty`},
		{file("replace", "/var/x", "x", 0o644), `machine.files[0].op "replace": unknown op; use create`},
		{file("create", userfiles.CRIPart, "[metrics\n", 0o644), `machine.files[0].content: the CRI config part /etc/cri/conf.d/20-customization.part is not valid TOML`},
	} {
		err := userfiles.Check([]config.File{tc.f})
		require.Error(t, err, tc.f.Path())
		require.Contains(t, err.Error(), tc.want)
	}
}

func TestCheckEnv(t *testing.T) {
	require.NoError(t, userfiles.CheckEnv(map[string]string{"https_proxy": "http://10.5.0.1:3128", "GRPC_GO_LOG_SEVERITY_LEVEL": "info"}))

	err := userfiles.CheckEnv(map[string]string{"A=B": "x", "OK": "y"})
	require.ErrorContains(t, err, `machine.env["A=B"]: a variable's name must be non-empty without '='`)
	require.NotContains(t, err.Error(), `"OK"`)
}

// TestMergeCRIParts: a part's key replaces the base's inside a table the base has, a new table
// is added, the base's other keys stay; files other than *.part are not read.
func TestMergeCRIParts(t *testing.T) {
	dir := t.TempDir()
	base := "version = 3\n\n[plugins.\"io.containerd.cri.v1.images\".pinned_images]\n  sandbox = \"registry.k8s.io/pause:3.10\"\n\n[plugins.\"io.containerd.cri.v1.runtime\"]\n  tolerate_missing_hugetlb_controller = true\n"

	out, err := userfiles.MergeCRIParts(base, dir)
	require.NoError(t, err)
	require.Equal(t, base, out, "without parts the base is kept byte for byte")

	require.NoError(t, os.WriteFile(filepath.Join(dir, userfiles.CRIPartName), []byte(
		"[plugins.\"io.containerd.cri.v1.images\".pinned_images]\n  sandbox = \"registry.k8s.io/pause:3.8\"\n[metrics]\n  address = \"0.0.0.0:11234\"\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("not toml ["), 0o600))

	out, err = userfiles.MergeCRIParts(base, dir)
	require.NoError(t, err)

	var got map[string]any
	require.NoError(t, toml.Unmarshal([]byte(out), &got))

	plugins := got["plugins"].(map[string]any)
	images := plugins["io.containerd.cri.v1.images"].(map[string]any)
	require.Equal(t, "registry.k8s.io/pause:3.8", images["pinned_images"].(map[string]any)["sandbox"])
	require.Equal(t, true, plugins["io.containerd.cri.v1.runtime"].(map[string]any)["tolerate_missing_hugetlb_controller"])
	require.Equal(t, "0.0.0.0:11234", got["metrics"].(map[string]any)["address"])
	require.EqualValues(t, 3, got["version"])
	require.True(t, strings.Contains(out, "version = 3"))

	require.NoError(t, os.WriteFile(filepath.Join(dir, userfiles.CRIPartName), []byte("[broken"), 0o600))
	_, err = userfiles.MergeCRIParts(base, dir)
	require.ErrorContains(t, err, "is not valid TOML")
}

// TestEnvSorted: machine.env as KEY=value in a stable order.
func TestEnvSorted(t *testing.T) {
	cfg, err := container.New(&v1alpha1.Config{MachineConfig: &v1alpha1.MachineConfig{MachineEnv: v1alpha1.Env{"https_proxy": "http://p:3128", "GRPC_GO_LOG_SEVERITY_LEVEL": "info"}}})
	require.NoError(t, err)
	require.Equal(t, []string{"GRPC_GO_LOG_SEVERITY_LEVEL=info", "https_proxy=http://p:3128"}, userfiles.Env(cfg))
	require.Empty(t, userfiles.Env(nil))
}
