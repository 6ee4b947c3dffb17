package udev

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// Rules are udev rules (the rules-file language, as machine.udev.rules holds them), of the keys
// this udevd knows: it matches ACTION, KERNEL, SUBSYSTEM, DEVTYPE, DRIVER, ENV{key} and
// ATTR{file} (== and !=, shell globs with | alternatives), and assigns SYMLINK+= (a /dev link
// to the device), ATTR{file}= (a sysfs write) and ENV{key}= (seen by the later rules). ParseRules
// refuses any other key, so a rule is applied as written or not accepted.
type Rules []Rule

// Rule is one rule: its keys, in order.
type Rule struct {
	Line  string
	Match []Key
	Set   []Key
}

// Key is one KEY{attr}op"value" of a rule.
type Key struct {
	Name, Attr, Op, Value string
}

var (
	matchKeys = []string{"ACTION", "KERNEL", "SUBSYSTEM", "DEVTYPE", "DRIVER", "ENV", "ATTR"}
	attrKeys  = []string{"ENV", "ATTR"}
)

// ParseRules reads rule texts (one or more lines each; # comments, blank lines and lines
// continued with a trailing backslash as in a rules file); an error names the text's index.
func ParseRules(texts []string) (Rules, error) {
	var rules Rules

	for i, text := range texts {
		rs, err := ParseText(text)
		if err != nil {
			return nil, fmt.Errorf("[%d]: %w", i, err)
		}

		rules = append(rules, rs...)
	}

	return rules, nil
}

// ParseText reads one rule text, of one or more lines.
func ParseText(text string) (Rules, error) {
	var rules Rules

	for _, line := range strings.Split(strings.ReplaceAll(text, "\\\n", ""), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}

		r, err := parseRule(line)
		if err != nil {
			return nil, err
		}

		rules = append(rules, r)
	}

	return rules, nil
}

func parseRule(line string) (Rule, error) {
	r := Rule{Line: line}
	rest := line

	for {
		rest = strings.TrimLeft(rest, " \t,")
		if rest == "" {
			break
		}

		var k Key

		end := strings.IndexAny(rest, "=!+-:{")
		if end <= 0 {
			return r, fmt.Errorf("%q: expected KEY op \"value\" at %q", line, rest)
		}

		k.Name, rest = rest[:end], rest[end:]

		if strings.HasPrefix(rest, "{") {
			closing := strings.IndexByte(rest, '}')
			if closing < 0 {
				return r, fmt.Errorf("%q: %s{ is not closed", line, k.Name)
			}

			k.Attr, rest = rest[1:closing], rest[closing+1:]
		}

		for _, op := range []string{"==", "!=", "+=", "-=", ":=", "="} {
			if strings.HasPrefix(rest, op) {
				k.Op, rest = op, rest[len(op):]

				break
			}
		}

		if k.Op == "" || !strings.HasPrefix(rest, `"`) {
			return r, fmt.Errorf("%q: expected an operator and a quoted value after %s", line, k.Name)
		}

		closing := strings.IndexByte(rest[1:], '"')
		if closing < 0 {
			return r, fmt.Errorf("%q: the value of %s is not closed", line, k.Name)
		}

		k.Value, rest = rest[1:closing+1], rest[closing+2:]

		if err := r.add(k); err != nil {
			return r, fmt.Errorf("%q: %w", line, err)
		}
	}

	if len(r.Set) == 0 {
		return r, fmt.Errorf("%q: no assignment (SYMLINK+=, ATTR{file}=, ENV{key}=): the rule does nothing", line)
	}

	return r, nil
}

func (r *Rule) add(k Key) error {
	known := slices.Contains(matchKeys, k.Name) || k.Name == "SYMLINK"
	if known && slices.Contains(attrKeys, k.Name) != (k.Attr != "") {
		return fmt.Errorf("%s: ENV and ATTR take {name}, the other keys none", k.Name)
	}

	if k.Op == "==" || k.Op == "!=" {
		if !slices.Contains(matchKeys, k.Name) {
			return fmt.Errorf("matching on %s is not supported by this node's udevd (it matches %s)", k.Name, strings.Join(matchKeys, ", "))
		}

		r.Match = append(r.Match, k)

		return nil
	}

	switch {
	case k.Name == "SYMLINK" && k.Op == "+=":
		if strings.Contains(k.Value, "disk/") {
			return errors.New("SYMLINK under disk/ is not supported: the node keeps /dev/disk's links itself")
		}
	case (k.Name == "ATTR" || k.Name == "ENV") && k.Op == "=":
		if strings.Contains(k.Attr, "..") || strings.HasPrefix(k.Attr, "/") {
			return fmt.Errorf("ATTR{%s}: a device's attribute is a path under its sysfs folder", k.Attr)
		}
	default:
		return fmt.Errorf("%s%s is not supported by this node's udevd (it assigns SYMLINK+=, ATTR{file}=, ENV{key}=; no RUN, MODE, OWNER, NAME, ...)", k.Name, k.Op)
	}

	if err := checkSubst(k.Value); err != nil {
		return fmt.Errorf("%s: %w", k.Name, err)
	}

	r.Set = append(r.Set, k)

	return nil
}

// checkSubst allows the substitutions this udevd makes: %k and $kernel (the kernel's name of
// the device), %% and $$.
func checkSubst(v string) error {
	for i := 0; i < len(v); i++ {
		if v[i] != '%' && v[i] != '$' {
			continue
		}

		rest := v[i:]

		switch {
		case strings.HasPrefix(rest, "%k"), strings.HasPrefix(rest, "%%"), strings.HasPrefix(rest, "$$"):
			i++
		case strings.HasPrefix(rest, "$kernel"):
			i += len("$kernel") - 1
		default:
			return fmt.Errorf("the substitution at %q is not supported (only %%k, $kernel, %%%%, $$)", rest)
		}
	}

	return nil
}

func subst(v, kernel string) string {
	return strings.NewReplacer("%k", kernel, "$kernel", kernel, "%%", "%", "$$", "$").Replace(v)
}

// Device is a device as the rules see it: its sysfs folder and its uevent's keys.
type Device struct {
	Syspath string            // /sys/devices/...
	Action  string            // add, change, ...
	Env     map[string]string // SUBSYSTEM, DEVNAME, DEVTYPE, ... (the rules' ENV{key}= are added)
}

// kernel is the device's kernel name (vda, eth0): its sysfs folder's.
func (d Device) kernel() string { return filepath.Base(d.Syspath) }

func (d Device) value(k Key) (string, bool) {
	switch k.Name {
	case "ACTION":
		return d.Action, true
	case "KERNEL":
		return d.kernel(), true
	case "SUBSYSTEM":
		return d.Env["SUBSYSTEM"], true
	case "DEVTYPE":
		return d.Env["DEVTYPE"], true
	case "DRIVER":
		return d.Env["DRIVER"], true
	case "ENV":
		v, ok := d.Env[k.Attr]

		return v, ok
	default: // ATTR
		b, err := os.ReadFile(filepath.Join(d.Syspath, k.Attr))

		return strings.TrimRight(string(b), "\n "), err == nil
	}
}

// matches says whether value matches a rule's pattern: shell globs, | between alternatives.
func matches(pattern, value string) bool {
	for _, alt := range strings.Split(pattern, "|") {
		if ok, _ := path.Match(alt, value); ok {
			return true
		}
	}

	return false
}

// Result is what the rules assigned to a device: its links (relative to /dev) and the sysfs
// attributes they wrote, with the errors of those writes.
type Result struct {
	Links  []string
	Attrs  map[string]string
	Errors []error
}

// Apply runs the rules on a device, in order, as udevd does on its event: each rule whose match
// keys all hold assigns its keys (ATTR{file}= writes the device's sysfs file at once).
func (rs Rules) Apply(d Device) Result {
	res := Result{Attrs: map[string]string{}}

	if d.Env == nil {
		d.Env = map[string]string{}
	}

	for _, r := range rs {
		if !d.match(r) {
			continue
		}

		for _, k := range r.Set {
			v := subst(k.Value, d.kernel())

			switch k.Name {
			case "SYMLINK":
				for _, l := range strings.Fields(v) {
					if !slices.Contains(res.Links, l) {
						res.Links = append(res.Links, l)
					}
				}
			case "ENV":
				d.Env[k.Attr] = v
			case "ATTR":
				if err := os.WriteFile(filepath.Join(d.Syspath, k.Attr), []byte(v), 0); err != nil {
					res.Errors = append(res.Errors, fmt.Errorf("rule %q: %w", r.Line, err))
				} else {
					res.Attrs[k.Attr] = v
				}
			}
		}
	}

	return res
}

func (d Device) match(r Rule) bool {
	for _, k := range r.Match {
		v, ok := d.value(k)
		if (ok && matches(k.Value, v)) != (k.Op == "==") {
			return false
		}
	}

	return true
}

// ReadDevice reads a device from its sysfs folder as a trigger's "add" event would carry it: its
// uevent file's keys, SUBSYSTEM and DRIVER from its links.
func ReadDevice(syspath, action string) Device {
	d := Device{Syspath: syspath, Action: action, Env: map[string]string{}}

	if b, err := os.ReadFile(filepath.Join(syspath, "uevent")); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, "="); ok {
				d.Env[k] = v
			}
		}
	}

	if s, err := os.Readlink(filepath.Join(syspath, "subsystem")); err == nil {
		d.Env["SUBSYSTEM"] = filepath.Base(s)
	}

	if s, err := os.Readlink(filepath.Join(syspath, "driver")); err == nil {
		d.Env["DRIVER"] = filepath.Base(s)
	}

	return d
}

// AllDevices are the sysfs folders of the devices /sys/class and /sys/bus list (what `udevadm
// trigger` walks), each once.
func AllDevices(sysfs string) []string {
	var out []string

	seen := map[string]bool{}

	for _, glob := range []string{"class/*/*", "bus/*/devices/*"} {
		entries, _ := filepath.Glob(filepath.Join(sysfs, glob))

		for _, e := range entries {
			real, err := filepath.EvalSymlinks(e)
			if err != nil || seen[real] {
				continue
			}

			seen[real] = true

			out = append(out, real)
		}
	}

	slices.Sort(out)

	return out
}
