package configsupport

import (
	"fmt"
	"strings"
)

// Counts are the table's totals over leaf fields: each field counts once, as honoured when some
// node honours it (Partly says how many of those are refused on other nodes).
type Counts struct {
	Fields, Honoured, Refused, NoEffect, Partly int
}

// Count totals the fields by status.
func Count() Counts {
	var c Counts

	for _, p := range Fields() {
		r, _ := Lookup(p)
		c.Fields++

		switch r.StatusOn("") {
		case Honoured:
			c.Honoured++

			if r.Refused != "" {
				c.Partly++
			}
		case RefusedField:
			c.Refused++
		case NoEffect:
			c.NoEffect++
		}
	}

	return c
}

// Table is docs/config-coverage.md: every field of every document kind with what the node does
// with it.
func Table() string {
	var b strings.Builder

	c := Count()

	fmt.Fprintf(&b, "# Machine config coverage\n\n")
	fmt.Fprintf(&b, "What this node does with every field and document of the machine config (machinery v1.11.0). ")
	fmt.Fprintf(&b, "Written by `go test ./internal/configsupport -update` from the rules the node checks configs with ")
	fmt.Fprintf(&b, "(`internal/configsupport`); a test fails when a field has no rule or a named test does not exist.\n\n")
	fmt.Fprintf(&b, "- **honoured**: the field takes effect; the named test proves it.\n")
	fmt.Fprintf(&b, "- **refused**: `apply-config` (every mode, `--dry-run` too), `patch`, `edit` and the config given at boot ")
	fmt.Fprintf(&b, "refuse a config that sets it (InvalidArgument naming the field), and the node is unchanged. ")
	fmt.Fprintf(&b, "A field left at its zero value (false, empty) is not set.\n")
	fmt.Fprintf(&b, "- **no effect**: accepted and ignored by design, for the reason given.\n\n")
	fmt.Fprintf(&b, "%d fields: %d honoured (%d of them refused on some kinds of node), %d refused, %d no effect.\n",
		c.Fields, c.Honoured, c.Partly, c.Refused, c.NoEffect)

	for _, kind := range Kinds() {
		fmt.Fprintf(&b, "\n## %s\n\n| Field | Status | Test or reason |\n|---|---|---|\n", kind)

		for _, p := range FieldsOf(kind) {
			r, _ := Lookup(p)
			fmt.Fprintf(&b, "| `%s` | %s | %s |\n", p, status(r), detail(r))
		}
	}

	return b.String()
}

func status(r Rule) string {
	s := string(r.StatusOn(""))
	if r.Test != "" && r.Refused != "" && len(r.On) > 0 {
		s = fmt.Sprintf("honoured; refused on %s", nodes(r.On))
	}

	return s
}

func detail(r Rule) string {
	var parts []string

	if r.Test != "" {
		parts = append(parts, "`"+r.Test+"`")
	}

	if r.Refused != "" {
		parts = append(parts, escape(r.Refused+"; "+r.Fix))
	}

	if r.NoEffect != "" {
		parts = append(parts, escape(r.NoEffect))
	}

	return strings.Join(parts, "; ")
}

func nodes(ns []Node) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = string(n)
	}

	return strings.Join(s, ", ")
}

func escape(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
