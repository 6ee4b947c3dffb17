// Command testcheck reads `go test -json` on its standard input and fails the run on what a
// plain `go test` would call a pass: a test skipped for a reason the repository does not allow
// (hack/skips.txt). It prints what `go test` without -v prints (each package's result line and
// the whole output of failed tests), then each skipped test with its reason and each package's
// duration, slowest first.
//
// Usage: go test -json ./... | go run ./hack/testcheck [-allow hack/skips.txt]
//
// It exits 1 if any test or package failed, any skip is not on the allow list, or the input ends
// early (a killed run); 0 otherwise. The allow list's lines are "<package> <test> <why>",
// package relative to the module (internal/e2e/metal), test as go test names it (TestX/sub);
// blank lines and lines starting with # are ignored. A line without a why is an error: each
// allowed skip says why it may skip.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"
)

// module is the prefix the allow list leaves out of package paths.
const module = "github.com/talos-go/talos/"

// event is one line of `go test -json` (cmd/test2json's TestEvent).
type event struct {
	Action     string
	Package    string
	ImportPath string // build-output and build-fail events
	Test       string
	Output     string
	Elapsed    float64
}

func main() {
	allowPath := flag.String("allow", "hack/skips.txt", "the allow list of skips: <package> <test> <why> per line")
	flag.Parse()

	allow, err := readAllowList(*allowPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testcheck:", err)
		os.Exit(2)
	}

	os.Exit(run(os.Stdin, os.Stdout, allow))
}

// readAllowList reads the allow list: package and test to the why.
func readAllowList(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()

	return parseAllowList(f, path)
}

func parseAllowList(r io.Reader, name string) (map[string]string, error) {
	allow := map[string]string{}
	sc := bufio.NewScanner(r)

	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}

		fields := strings.Fields(line)
		if len(fields) < 3 {
			return nil, fmt.Errorf("%s:%d: want \"<package> <test> <why>\": every allowed skip says why it may skip", name, n)
		}

		allow[fields[0]+" "+fields[1]] = strings.Join(fields[2:], " ")
	}

	return allow, sc.Err()
}

// test is what is known of one test (or, with name "", of one package) so far.
type test struct {
	output []string
	result string // pass, fail, skip; "" while running
}

// run reads the events and writes the report; it returns the exit code.
func run(in io.Reader, out io.Writer, allow map[string]string) int {
	tests := map[string]*test{} // "<package> <test>"
	var order []string          // packages, in the order they finished

	elapsed := map[string]float64{}
	buildFailed := false

	dec := json.NewDecoder(in)

	for {
		var e event
		if err := dec.Decode(&e); err == io.EOF {
			break
		} else if err != nil {
			fmt.Fprintf(out, "testcheck: reading go test -json: %v\n", err)

			return 1
		}

		switch e.Action {
		case "build-output":
			fmt.Fprint(out, e.Output)

			continue
		case "build-fail":
			fmt.Fprintf(out, "testcheck: %s did not build\n", e.ImportPath)
			buildFailed = true

			continue
		}

		key := e.Package + " " + e.Test
		t := tests[key]
		if t == nil {
			t = &test{}
			tests[key] = t
		}

		switch e.Action {
		case "output":
			t.output = append(t.output, e.Output)
			if e.Test == "" && e.Output != "PASS\n" {
				// A package's own lines (ok, FAIL, a TestMain's messages) are what go test prints
				// (its PASS line only with -v).
				fmt.Fprint(out, e.Output)
			}
		case "pass", "fail", "skip":
			t.result = e.Action
			if e.Test == "" {
				order = append(order, e.Package)
				elapsed[e.Package] = e.Elapsed
			}

			if e.Test != "" && e.Action == "fail" {
				fmt.Fprint(out, strings.Join(t.output, ""))
			}
		}
	}

	if code := report(out, tests, order, elapsed, allow); code != 0 || buildFailed {
		return 1
	}

	return 0
}

// report names the unfinished packages, the skips and the durations, and decides the result.
func report(out io.Writer, tests map[string]*test, order []string, elapsed map[string]float64, allow map[string]string) int {
	code := 0

	var keys []string
	for k := range tests {
		keys = append(keys, k)
	}

	sort.Strings(keys)

	var skips []string

	for _, k := range keys {
		t := tests[k]
		pkg, name, _ := strings.Cut(k, " ")

		switch {
		case t.result == "" && name == "":
			fmt.Fprintf(out, "testcheck: %s never finished (the run was killed or timed out)\n", pkg)
			code = 1
		case t.result == "fail":
			code = 1
		case t.result == "skip":
			rel := strings.TrimPrefix(pkg, module)
			why, ok := allow[rel+" "+name]
			if !ok && name != "" {
				code = 1
				skips = append(skips, fmt.Sprintf("  NOT ALLOWED %s %s: %s", rel, name, skipReason(t.output)))
			} else if name != "" {
				skips = append(skips, fmt.Sprintf("  allowed     %s %s: %s (why: %s)", rel, name, skipReason(t.output), why))
			}
		}
	}

	if len(skips) > 0 {
		fmt.Fprintf(out, "\nskipped tests (%d); a skip not allowed by hack/skips.txt fails the run:\n%s\n", len(skips), strings.Join(skips, "\n"))
	}

	sort.SliceStable(order, func(i, j int) bool { return elapsed[order[i]] > elapsed[order[j]] })

	fmt.Fprintln(out, "\npackage durations, slowest first:")

	for _, p := range order {
		if elapsed[p] >= 1 {
			fmt.Fprintf(out, "  %8s  %s\n", (time.Duration(elapsed[p]*1000) * time.Millisecond).Round(time.Second), strings.TrimPrefix(p, module))
		}
	}

	return code
}

// skipReason is the message a skipped test left: its output after the "--- SKIP" line, or
// before it when the test printed it itself.
func skipReason(output []string) string {
	var lines []string

	for _, l := range output {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "=== ") || strings.HasPrefix(l, "--- SKIP") {
			continue
		}

		lines = append(lines, l)
	}

	if len(lines) == 0 {
		return "(no reason given)"
	}

	return strings.Join(lines, " / ")
}
