package configsupport

import (
	"slices"
	"sort"
	"strings"
)

// Node is the kind of node a config runs on, as far as fields differ between them.
type Node string

// The node kinds: the provisioners' nodes and a node on its own kernel.
const (
	// Process is a node of the process provisioner: processes sharing the host's kernel, mounts
	// and network.
	Process Node = "process"
	// Container is a node of the container provisioner: PID 1 in its own namespaces, on the
	// host's kernel.
	Container Node = "container"
	// Metal is a node on its own kernel (QEMU or hardware).
	Metal Node = "metal"
)

// Rule says what the node does with a field, or with every field under it (a subtree).
type Rule struct {
	// Path is a field path as Fields writes it, or a subtree's root.
	Path string
	// Test names the test that proves the field takes effect ("internal/e2e/container.TestX"),
	// where it is honoured.
	Test string
	// NoEffect says why setting the field changes nothing on this node, by design.
	NoEffect string
	// Refused says why the node refuses a config that sets the field, and Fix what to do.
	Refused, Fix string
	// On limits the refusal to these nodes; the field is honoured (Test) on the others.
	On []Node
}

// Status is what a rule means on one node.
type Status string

// The three answers.
const (
	Honoured     Status = "honoured"
	RefusedField Status = "refused"
	NoEffect     Status = "no effect"
)

// StatusOn is the rule's answer on one node; node "" asks for the answer on every node, so a
// refusal limited to some nodes counts as honoured.
func (r Rule) StatusOn(node Node) Status {
	switch {
	case r.Refused != "" && (len(r.On) == 0 || slices.Contains(r.On, node)):
		return RefusedField
	case r.Test != "":
		return Honoured
	default:
		return NoEffect
	}
}

// Rules is every rule, by area.
func Rules() []Rule {
	var all []Rule

	for _, area := range [][]Rule{machineRules, networkRules, kubernetesRules, storageRules, documentRules, kernelRules, podRules, installRules, watchdogRules, apiAccessRules} {
		all = append(all, area...)
	}

	sort.SliceStable(all, func(i, j int) bool { return all[i].Path < all[j].Path })

	return all
}

var index = func() map[string]Rule {
	m := map[string]Rule{}
	for _, r := range Rules() {
		m[r.Path] = r
	}

	return m
}()

// Lookup finds the rule for a field path: the rule of the path itself or of its nearest
// enclosing subtree.
func Lookup(path string) (Rule, bool) {
	for p := path; p != ""; p = parent(p) {
		if r, ok := index[p]; ok {
			return r, true
		}
	}

	return Rule{}, false
}

// parent cuts a path's last segment: a.b[].c → a.b[] → a.b → a; "" at the top.
func parent(p string) string {
	switch {
	case strings.HasSuffix(p, "[]"):
		return strings.TrimSuffix(p, "[]")
	case strings.HasSuffix(p, ".*"):
		return strings.TrimSuffix(p, ".*")
	}

	if i := strings.LastIndexByte(p, '.'); i >= 0 {
		return p[:i]
	}

	return ""
}
