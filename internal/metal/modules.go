package metal

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// Modules loads kernel modules from one modules folder (/lib/modules/<release>), with their
// dependencies from modules.dep and the aliases of modules.alias.
type Modules struct {
	dir     string
	deps    map[string][]string // module name → its dependencies' paths, deepest first
	paths   map[string]string   // module name → path under dir
	aliases [][2]string         // glob pattern → module name
	loaded  map[string]bool
}

// OpenModules reads the index files of dir.
func OpenModules(dir string) (*Modules, error) {
	m := &Modules{dir: dir, deps: map[string][]string{}, paths: map[string]string{}, loaded: map[string]bool{}}

	err := eachLine(filepath.Join(dir, "modules.dep"), func(line string) {
		path, deps, ok := strings.Cut(line, ":")
		if !ok {
			return
		}

		name := moduleName(path)
		m.paths[name] = path
		m.deps[name] = strings.Fields(deps)
	})
	if err != nil {
		return nil, err
	}

	err = eachLine(filepath.Join(dir, "modules.alias"), func(line string) {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "alias" {
			m.aliases = append(m.aliases, [2]string{f[1], f[2]})
		}
	})
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}

	return m, nil
}

// moduleName is a module's name from its path: kernel/fs/squashfs/squashfs.ko → squashfs, with
// dashes as underscores, as the kernel names them.
func moduleName(path string) string {
	base := filepath.Base(path)
	if i := strings.Index(base, ".ko"); i >= 0 {
		base = base[:i]
	}

	return strings.ReplaceAll(base, "-", "_")
}

// ErrNoModule is the error of loading a module the modules folder does not have.
var ErrNoModule = errors.New("no such module")

// Load loads the module name and, before it, what it depends on. A module built into the
// kernel or loaded already is no error.
func (m *Modules) Load(name string) error {
	return m.LoadWith(name, nil)
}

// LoadWith loads the module name with the parameters params ("numdummies=2"), and before it,
// without parameters, what it depends on. A module loaded already keeps the parameters it was
// loaded with: the kernel sets them at load time only.
func (m *Modules) LoadWith(name string, params []string) error {
	name = strings.ReplaceAll(name, "-", "_")

	path, ok := m.paths[name]
	if !ok {
		if builtIn(m.dir, name) {
			return nil
		}

		return fmt.Errorf("module %s: %w in %s/modules.dep", name, ErrNoModule, m.dir)
	}

	// modules.dep lists every dependency, the ones loaded last first.
	deps := m.deps[name]
	for i := len(deps) - 1; i >= 0; i-- {
		if err := m.insert(deps[i], moduleParams[moduleName(deps[i])]); err != nil {
			return err
		}
	}

	if params == nil {
		return m.insert(path, moduleParams[name])
	}

	return m.insert(path, strings.Join(params, " "))
}

// moduleParams are the parameters modules are loaded with: bonding would make a bond0 of its own
// otherwise (the config names the bonds).
var moduleParams = map[string]string{"bonding": "max_bonds=0"}

func (m *Modules) insert(path, params string) error {
	name := moduleName(path)
	if m.loaded[name] {
		return nil
	}

	f, err := os.Open(filepath.Join(m.dir, path))
	if err != nil {
		return fmt.Errorf("module %s: %w", name, err)
	}
	defer f.Close()

	if err = unix.FinitModule(int(f.Fd()), params, 0); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("loading module %s (parameters %q): %w", name, params, err)
	}

	m.loaded[name] = true

	return nil
}

// ForAlias names the modules whose alias patterns match a device's modalias.
func (m *Modules) ForAlias(modalias string) []string {
	var names []string

	for _, a := range m.aliases {
		if ok, _ := filepath.Match(a[0], modalias); ok && !slices.Contains(names, a[1]) {
			names = append(names, a[1])
		}
	}

	return names
}

// LoadForDevices loads the module of every device under sysfs that announces a modalias and
// has a module here, as udevd does on the uevents of the boot; it returns what it loaded.
// Loading a bus driver (virtio_pci) adds devices (virtio), so it goes on until none is new.
func (m *Modules) LoadForDevices(sysfs string) ([]string, error) {
	var loaded []string

	seen := map[string]bool{}

	for range 5 {
		found, _ := filepath.Glob(filepath.Join(sysfs, "bus", "*", "devices", "*", "modalias"))

		var fresh bool

		for _, f := range found {
			b, err := os.ReadFile(f)
			if err != nil {
				continue
			}

			alias := strings.TrimSpace(string(b))
			if alias == "" || seen[alias] {
				continue
			}

			seen[alias], fresh = true, true

			for _, name := range m.ForAlias(alias) {
				if m.loaded[name] {
					continue
				}

				if err = m.Load(name); err != nil {
					return loaded, err
				}

				loaded = append(loaded, name)
			}
		}

		if !fresh {
			break
		}
	}

	return loaded, nil
}

// builtIn reports whether the kernel has name built in (modules.builtin).
func builtIn(dir, name string) bool {
	var found bool

	_ = eachLine(filepath.Join(dir, "modules.builtin"), func(line string) {
		found = found || moduleName(line) == name
	})

	return found
}

func eachLine(path string, fn func(string)) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()

	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 64<<10), 1<<20)

	for s.Scan() {
		fn(s.Text())
	}

	return s.Err()
}

// NodeModules is where a metal node's root has the kernel's modules: the initramfs's, bound
// there by the boot.
const NodeModules = "/usr/lib/modules"

// LoadModule loads a module of the running kernel (and what it depends on) from NodeModules,
// for machined: the bonding driver when the config names a bond, say.
func LoadModule(name string) error {
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		return err
	}

	mods, err := OpenModules(filepath.Join(NodeModules, unix.ByteSliceToString(uts.Release[:])))
	if err != nil {
		return err
	}

	return mods.Load(name)
}

// LoadModuleWith loads a module of the running kernel from NodeModules with parameters, for
// machine.kernel.modules.
func LoadModuleWith(name string, params []string) error {
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		return err
	}

	mods, err := OpenModules(filepath.Join(NodeModules, unix.ByteSliceToString(uts.Release[:])))
	if err != nil {
		return err
	}

	return mods.LoadWith(name, params)
}

// LoadForModalias loads the node's modules a device's modalias names (a uevent's MODALIAS), as
// udevd does on hotplug; it returns what it loaded.
func LoadForModalias(modalias string) ([]string, error) {
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		return nil, err
	}

	mods, err := OpenModules(filepath.Join(NodeModules, unix.ByteSliceToString(uts.Release[:])))
	if err != nil {
		return nil, err
	}

	names := mods.ForAlias(modalias)
	for _, name := range names {
		if err = mods.Load(name); err != nil {
			return nil, err
		}
	}

	return names, nil
}
