// Command bugs reproduces the known bugs of public operators that examples/bugs.yaml lists: each at its
// buggy version, by an ordinary spec of the operator's example (unperturbed, or with make explore's budget
// over it), and then the same check at the version that fixed it. See docs/architecture.md §10.
//
// Usage (from the module root, with KUBEBUILDER_ASSETS set; `make bugs` does both and builds bin/ensemble):
//
//	go run ./internal/cmd/bugs [-bugs ID,ID] [-catalog examples/bugs.yaml] [-ensemble bin/ensemble] [-j 1] [-report-dir DIR] [-timeout 20m]
//
// Entries that share example, buggy version, spec and explore options share their runs (one sweep
// instead of one per entry). Per such group:
//
//  1. At the buggy version: with explore, bin/ensemble explore over the spec with the entries' modes and
//     budget, with an -until per entry (its Expect), so the sweep stops once every entry's Expect has matched
//     a failing point's failures or first difference, or at its budget; each entry's row takes from
//     explore.json its own point, points tried and time to find. Without explore, the example's spec alone
//     (go test), whose failure must match an entry's Expect to find it. Points that failed as no entry of the
//     group expects are findings of their own: the rows name them (Others), and they count as finding no bug.
//  2. At each fixed version of an entry found: the points that found its entries, in one explore -points
//     run, or the same spec. Each must pass.
//
// It prints the table bug | operator | buggy | fixed | found by | points tried | time to find | verdict at
// fixed, and for each row the command that reruns it (make bugs BUGS=ID) and where its runs are. Every run
// and bugs.json are under -report-dir; without it, under a new temporary directory, kept when a row is
// not as expected (not found, or failing at its fixed version) and removed otherwise, or on interrupt.
//
// Exit 0 when every bug was found at its buggy version and passed at its fixed one; 1 when one was not
// (each named); 2 with one line on bad input or a run that could not be judged. SIGINT or SIGTERM stops the
// run in progress, removes the temporary directory and exits 2.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/onsi/ginkgo/v2/types"

	"github.com/ensembletest/ensemble/internal/cmdline"
	"github.com/ensembletest/ensemble/internal/ginkgoreport"
	"github.com/ensembletest/ensemble/internal/proc"
	"github.com/ensembletest/ensemble/internal/textout"
)

// config is the command line.
type config struct {
	bugs                               []string
	catalog, examples, explore, report string
	timeout                            time.Duration
	// jobs is explore's -j: point runs at once.
	jobs int
}

func main() {
	var c config
	var bugs string
	flag.StringVar(&bugs, "bugs", "", "comma-separated entries to run, such as cluster-api#13649 (default: every entry)")
	flag.StringVar(&c.catalog, "catalog", "examples/bugs.yaml", "the catalog of known bugs")
	flag.StringVar(&c.explore, "ensemble", "bin/ensemble", "the ensemble command's binary, whose explore it runs")
	flag.StringVar(&c.report, "report-dir", "", "directory of the runs and bugs.json (default: a new temporary directory)")
	flag.DurationVar(&c.timeout, "timeout", 20*time.Minute, "each run's -test.timeout")
	flag.IntVar(&c.jobs, "j", 1, "explore's point runs at once")
	if err := cmdline.Parse(flag.CommandLine, os.Args[1:], map[string]string{"bugs": "BUGS", "report-dir": "REPORT_DIR", "timeout": "SUITE_TIMEOUT", "j": "EXPLORE_JOBS"}); err != nil {
		fail(err)
	}
	for _, b := range strings.Split(bugs, ",") {
		if b = strings.TrimSpace(b); b != "" {
			c.bugs = append(c.bugs, b)
		}
	}
	c.examples = filepath.Join(filepath.Dir(c.catalog))
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		fail(errors.New("KUBEBUILDER_ASSETS is not set: run `make bugs`, or set it to $(tools/envtest/build.sh --dir)"))
	}
	ctx, stop := proc.SignalContext()
	defer stop()
	res, err := run(ctx, c, os.Stdout)
	if ctx.Err() != nil {
		err = errors.New("interrupted: the run in progress is stopped and the temporary runs directory removed (REPORT_DIR=dir keeps the runs)")
	}
	if err != nil {
		fail(err)
	}
	if len(res.Wrong) > 0 {
		fmt.Printf("\n%d of %s not as expected: %s\n", len(res.Wrong), textout.Count(len(res.Rows), "bug", "bugs"), strings.Join(res.Wrong, "; "))
		os.Exit(1)
	}
	fmt.Printf("\nevery bug found at its buggy version and passing at its fixed one (%s)\n", textout.Count(len(res.Rows), "bug", "bugs"))
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "bugs: %v\n", err)
	os.Exit(2)
}

// Result is what the command found, as bugs.json holds it.
type Result struct {
	Rows []Row
	// Wrong names the rows not as expected, with why.
	Wrong []string `json:",omitempty"`
	// Wall is the whole command's wall time.
	Wall Duration
}

// run checks the command line and the catalog, runs the entries and prints the table. Errors: a bad
// catalog, an entry -bugs names that it does not list, the explore binary missing, a run that could not be
// judged (no report), an interrupt.
func run(ctx context.Context, c config, out io.Writer) (Result, error) {
	start := time.Now()
	var res Result
	if c.timeout <= 0 {
		return res, fmt.Errorf("-timeout (make's SUITE_TIMEOUT) is %s: pass each run's limit, such as 20m", c.timeout)
	}
	if c.jobs < 1 {
		return res, fmt.Errorf("-j (make's EXPLORE_JOBS) is %d: pass a number of point runs at once, 1 or more", c.jobs)
	}
	entries, err := readCatalog(c.catalog, c.examples)
	if err != nil {
		return res, err
	}
	if len(c.bugs) > 0 {
		var picked []Entry
		for _, b := range c.bugs {
			i := slices.IndexFunc(entries, func(e Entry) bool { return e.Bug == b })
			if i < 0 {
				var ids []string
				for _, e := range entries {
					ids = append(ids, e.Bug)
				}
				return res, fmt.Errorf("-bugs (make's BUGS) names %q, which %s does not list: name some of %s", b, c.catalog, strings.Join(ids, ", "))
			}
			picked = append(picked, entries[i])
		}
		entries = picked
	}
	if slices.ContainsFunc(entries, func(e Entry) bool { return e.Explore != nil }) {
		if _, err := os.Stat(c.explore); err != nil {
			return res, fmt.Errorf("the ensemble binary %s is missing: run `make bugs`, which builds it, or pass -ensemble", c.explore)
		}
	}
	dir, temp := c.report, c.report == ""
	if temp {
		if dir, err = os.MkdirTemp("", "ensemble-bugs-*"); err != nil {
			return res, err
		}
		defer func() {
			if ctx.Err() != nil || len(res.Wrong) == 0 {
				_ = os.RemoveAll(dir)
			}
		}()
	}
	fmt.Fprintf(out, "runs under %s\n", dir)
	byBug := map[string]Row{}
	for _, g := range groups(entries) {
		var names []string
		for _, e := range g {
			names = append(names, safe(e.Bug))
		}
		rows, err := runGroup(ctx, c, g, filepath.Join(dir, strings.Join(names, "+")), out)
		if err != nil {
			return res, fmt.Errorf("%s: %w", bugsOf(g), err)
		}
		for _, r := range rows {
			byBug[r.Bug] = r
		}
	}
	for _, e := range entries {
		row := byBug[e.Bug]
		res.Rows = append(res.Rows, row)
		switch {
		case !row.Found:
			res.Wrong = append(res.Wrong, fmt.Sprintf("%s not found at %s (%s)", e.Bug, e.Buggy, row.Failure))
		case row.AtFixed != "pass":
			res.Wrong = append(res.Wrong, fmt.Sprintf("%s fails at its fixed version %s too (%s)", e.Bug, e.Fixed, row.AtFixedFailure))
		}
	}
	res.Wall = Duration(time.Since(start))
	fmt.Fprintln(out)
	if err := table(out, res.Rows); err != nil {
		return res, err
	}
	js, err := textout.JSON(res)
	if err != nil {
		return res, err
	}
	if err := os.WriteFile(filepath.Join(dir, "bugs.json"), js, 0o644); err != nil {
		return res, err
	}
	fmt.Fprintf(out, "all in %s\n", time.Duration(res.Wall).Round(time.Second))
	if !temp || len(res.Wrong) > 0 {
		fmt.Fprintf(out, "every row as JSON: %s\n", filepath.Join(dir, "bugs.json"))
	}
	return res, nil
}

// safe makes a bug's name a directory name.
func safe(bug string) string { return strings.NewReplacer("#", "-", "/", "-").Replace(bug) }

// groups splits entries into the groups that share one run at the buggy version: the same example, buggy
// version, spec and explore options (an explore sweep, or the spec alone). Groups and their entries are in
// the order of their first entry.
func groups(entries []Entry) [][]Entry {
	type key struct {
		example, buggy, spec string
		explore              Exploration
		explored             bool
	}
	var keys []key
	byKey := map[key][]Entry{}
	for _, e := range entries {
		k := key{example: e.Example, buggy: e.Buggy, spec: e.Spec, explored: e.Explore != nil}
		if e.Explore != nil {
			k.explore = *e.Explore
		}
		if _, ok := byKey[k]; !ok {
			keys = append(keys, k)
		}
		byKey[k] = append(byKey[k], e)
	}
	var out [][]Entry
	for _, k := range keys {
		out = append(out, byKey[k])
	}
	return out
}

// bugsOf names a group's entries, for a progress line or an error.
func bugsOf(g []Entry) string {
	var ids []string
	for _, e := range g {
		ids = append(ids, e.Bug)
	}
	return strings.Join(ids, ", ")
}

// runGroup runs a group of entries (see groups) under dir: one run at their buggy version, which finds each
// entry whose Expect its failure matches, then at each fixed version one run of the checks that found that
// version's entries, and returns a row per entry, in g's order.
//
// With explore, the run at the buggy version is one sweep with an -until per entry: it stops taking points
// once every entry's Expect has matched a failing point, or at its budget. Each row has its own finding
// (explore.json's Until): the point, how many points it took and the wall time to its verdict. At a fixed
// version, one explore -points runs the points that found its entries. Without explore, the spec runs alone at
// the buggy version, and at each fixed version when it found an entry of it.
func runGroup(ctx context.Context, c config, g []Entry, dir string, out io.Writer) ([]Row, error) {
	rows := make([]Row, len(g))
	for i, e := range g {
		rows[i] = Row{Bug: e.Bug, Operator: e.Example, Buggy: e.Buggy, Fixed: e.Fixed, FoundBy: e.FoundBy, AtFixed: "not run",
			Command: "make bugs BUGS='" + e.Bug + "'"}
	}
	first := g[0]
	example := filepath.Join(c.examples, first.Example)
	focus := regexp.QuoteMeta(first.Spec) + "$"
	expects := make([]*regexp.Regexp, len(g))
	for i, e := range g {
		expects[i] = regexp.MustCompile(e.Expect) // checked by readCatalog
	}
	fmt.Fprintf(out, "%s: %s at %s\n", bugsOf(g), first.Example, first.Buggy)
	if first.Explore != nil {
		args := []string{"-focus", focus, "-modes", first.Explore.Modes, "-budget", first.Explore.Budget}
		for _, e := range g {
			args = append(args, "-until", e.Expect)
		}
		if first.Explore.Batch > 0 {
			args = append(args, "-batch", strconv.Itoa(first.Explore.Batch))
		}
		x, took, err := explore(ctx, c, example, first.Buggy, filepath.Join(dir, first.Buggy), args...)
		if err != nil {
			return rows, err
		}
		if len(x.Until) != len(g) {
			return rows, fmt.Errorf("explore at %s wrote %d -until findings for %d entries: rebuild %s from this tree (make bugs does)", first.Buggy, len(x.Until), len(g), c.explore)
		}
		for i, e := range g {
			row, f := &rows[i], x.Until[i]
			row.TimeToFind, row.Tried = Duration(took), len(x.Rows)
			if f.Point == "" {
				row.Failure = fmt.Sprintf("no point of %s failed with %q", textout.Count(len(x.Rows), "point", "points"), e.Expect)
			} else {
				r := x.Rows[f.Tried-1]
				// The row shows the line that matches the entry's expect, not the first difference beside it.
				row.Found, row.Tried, row.Point, row.TimeToFind = true, f.Tried, f.Point, f.Elapsed
				row.Failure = lineWith(r.text(), expects[i])
			}
			// A failing point that no entry of the group expects is a finding of its own.
			for _, r := range x.Rows {
				if r.Verdict == "fail" && !slices.ContainsFunc(expects, func(re *regexp.Regexp) bool { return re.MatchString(r.text()) }) {
					row.Others = append(row.Others, r.Point+": "+firstNonEmpty(r.Difference, r.Failure))
				}
			}
		}
		for _, fixed := range fixedVersions(g, rows) {
			var points []string
			for i, e := range g {
				if e.Fixed == fixed && rows[i].Found && !slices.Contains(points, rows[i].Point) {
					points = append(points, rows[i].Point)
				}
			}
			fmt.Fprintf(out, "%s: %s at %s, %s %s\n", bugsOf(g), first.Example, fixed, textout.Count(len(points), "point", "points"), strings.Join(points, " "))
			fx, _, err := explore(ctx, c, example, fixed, filepath.Join(dir, fixed), "-focus", focus, "-points", strings.Join(points, " "))
			if err != nil {
				return rows, err
			}
			if len(fx.Rows) != len(points) {
				return rows, fmt.Errorf("explore at %s ran %d points, want the %d it was given", fixed, len(fx.Rows), len(points))
			}
			for i, e := range g {
				if e.Fixed != fixed || !rows[i].Found {
					continue
				}
				j := slices.IndexFunc(fx.Rows, func(r exploreRow) bool { return r.Point == rows[i].Point })
				if j < 0 {
					return rows, fmt.Errorf("explore at %s ran no point %s", fixed, rows[i].Point)
				}
				rows[i].AtFixed, rows[i].AtFixedFailure = fx.Rows[j].Verdict, firstNonEmpty(fx.Rows[j].Difference, fx.Rows[j].Failure)
			}
		}
		return rows, nil
	}
	sr, took, err := spec(ctx, c, example, first.Buggy, focus, filepath.Join(dir, first.Buggy))
	if err != nil {
		return rows, err
	}
	failed := sr.State.Is(types.SpecStateFailureStates)
	for i, e := range g {
		row := &rows[i]
		row.TimeToFind = Duration(took)
		row.Failure = firstLine(sr.Failure.Message)
		row.Found = failed && expects[i].MatchString(sr.Failure.Message)
		switch {
		case !failed:
			row.Failure = "the spec " + sr.State.String()
		case !row.Found:
			row.Failure = fmt.Sprintf("the spec failed otherwise than %q: %s", e.Expect, row.Failure)
		}
	}
	for _, fixed := range fixedVersions(g, rows) {
		fmt.Fprintf(out, "%s: %s at %s\n", bugsOf(g), first.Example, fixed)
		fr, _, err := spec(ctx, c, example, fixed, focus, filepath.Join(dir, fixed))
		if err != nil {
			return rows, err
		}
		for i, e := range g {
			if e.Fixed != fixed || !rows[i].Found {
				continue
			}
			rows[i].AtFixed = "pass"
			if fr.State.Is(types.SpecStateFailureStates) {
				rows[i].AtFixed, rows[i].AtFixedFailure = "fail", firstLine(fr.Failure.Message)
			}
		}
	}
	return rows, nil
}

// fixedVersions are the fixed versions of g's entries that were found (rows, g's), in g's order, each once.
func fixedVersions(g []Entry, rows []Row) []string {
	var out []string
	for i, e := range g {
		if rows[i].Found && !slices.Contains(out, e.Fixed) {
			out = append(out, e.Fixed)
		}
	}
	return out
}

// exploreRow is what bugs reads of a row of explore.json.
type exploreRow struct {
	Point, Verdict, Failure, Difference, Differential string
	Others                                            []string
}

// text is every failure line the row holds, one a line: its failure, first difference, the differential
// oracle's first field and other failures (explore's -until matches the same).
func (r exploreRow) text() string {
	return strings.Join(append([]string{r.Failure, r.Difference, r.Differential}, r.Others...), "\n")
}

// exploreFound is what bugs reads of one -until's finding in explore.json: the point ("" when none
// matched), its place among the rows from 1, and the wall time from explore's start to its verdict.
type exploreFound struct {
	Point   string
	Tried   int
	Elapsed Duration
}

// exploration is what bugs reads of explore.json.
type exploration struct {
	Rows  []exploreRow
	Until []exploreFound
}

// explore runs the explore binary on the example at version with args, its runs and explore.json under dir, its
// output to dir/output.log, and returns explore.json and the run's wall time. Errors: the binary failed
// (exit 2: bad input, no compile, a failing unperturbed run; its last lines named) or wrote no explore.json.
func explore(ctx context.Context, c config, example, version, dir string, args ...string) (exploration, time.Duration, error) {
	var x exploration
	suite, err := suiteDir(example, version)
	if err != nil {
		return x, 0, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return x, 0, err
	}
	log := filepath.Join(dir, "output.log")
	bin, err := filepath.Abs(c.explore)
	if err != nil {
		return x, 0, err
	}
	cmd := exec.Command(bin, append([]string{"explore", "-suite", suite, "-report-dir", dir, "-timeout", c.timeout.String(), "-j", fmt.Sprint(c.jobs)}, args...)...)
	began := time.Now()
	if err := runLogged(ctx, cmd, log); err != nil {
		return x, 0, fmt.Errorf("explore at %s: %w; %s", version, err, tail(log))
	}
	took := time.Since(began)
	b, err := os.ReadFile(filepath.Join(dir, "explore.json"))
	if err == nil {
		err = json.Unmarshal(b, &x)
	}
	if err != nil {
		return x, took, fmt.Errorf("explore at %s wrote no explore.json: %w; %s", version, err, tail(log))
	}
	return x, took, nil
}

// spec runs the example at version with the focus alone (go test in its directory), under dir, and
// returns the one spec's report and the run's wall time (compile included). Errors: no report, or a focus
// that ran no spec or more than one.
func spec(ctx context.Context, c config, example, version, focus, dir string) (types.SpecReport, time.Duration, error) {
	suite, err := suiteDir(example, version)
	if err != nil {
		return types.SpecReport{}, 0, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return types.SpecReport{}, 0, err
	}
	report, log := filepath.Join(dir, "suite.json"), filepath.Join(dir, "output.log")
	cmd := exec.Command("go", "test", "-count=1", "-timeout", (c.timeout + time.Minute).String(), ".",
		"-args", "-ginkgo.focus="+focus, "-ginkgo.json-report="+report, "-ginkgo.v")
	cmd.Dir = suite
	began := time.Now()
	err = runLogged(ctx, cmd, log)
	took := time.Since(began)
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		return types.SpecReport{}, took, err
	}
	reports, rerr := ginkgoreport.Read(report)
	if rerr != nil {
		return types.SpecReport{}, took, fmt.Errorf("the example at %s wrote no report (%v); %s", version, err, tail(log))
	}
	ran := ginkgoreport.Ran(reports)
	if len(ran) != 1 {
		return types.SpecReport{}, took, fmt.Errorf("the focus %q ran %s at %s, want the entry's one spec", focus, textout.Count(len(ran), "spec", "specs"), version)
	}
	return ran[0], took, nil
}

// runLogged runs cmd with its output to the file log, stopping it when ctx is done (proc.Run).
func runLogged(ctx context.Context, cmd *exec.Cmd, log string) error {
	f, err := os.Create(log)
	if err != nil {
		return err
	}
	defer f.Close()
	cmd.Stdout, cmd.Stderr = f, f
	return proc.Run(ctx, cmd)
}

// tail is the last lines of the file log, for an error.
func tail(log string) string {
	b, _ := os.ReadFile(log)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return "its output ends: " + strings.Join(lines[max(0, len(lines)-3):], " / ") + " (all of it: " + log + ")"
}

// lineWith is the first line of s that re matches.
func lineWith(s string, re *regexp.Regexp) string {
	for _, l := range strings.Split(s, "\n") {
		if re.MatchString(l) {
			return strings.TrimSpace(l)
		}
	}
	return firstLine(s)
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return firstLine(b)
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return l
}

// table prints the rows: bug | operator | buggy | fixed | found by | points tried | time to find | verdict at
// fixed, then each row's failure, point and rerun command.
func table(w io.Writer, rows []Row) error {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintln(tw, "bug\t operator\t buggy\t fixed\t found by\t points tried\t time to find\t verdict at fixed")
	for _, r := range rows {
		found := r.FoundBy
		if !r.Found {
			found = "NOT FOUND"
		}
		tried := "-"
		if r.Point != "" || r.Tried > 0 {
			tried = fmt.Sprint(r.Tried)
		}
		fmt.Fprintf(tw, "%s\t %s\t %s\t %s\t %s\t %s\t %s\t %s\n", r.Bug, r.Operator, r.Buggy, r.Fixed, found, tried,
			time.Duration(r.TimeToFind).Round(time.Second), r.AtFixed)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range rows {
		fmt.Fprintf(w, "\n%s\n  at %s: %s\n", r.Bug, r.Buggy, r.Failure)
		if r.Point != "" {
			fmt.Fprintf(w, "  point:  %s\n", r.Point)
		}
		if r.AtFixedFailure != "" {
			fmt.Fprintf(w, "  at %s: %s\n", r.Fixed, r.AtFixedFailure)
		}
		for _, o := range r.Others {
			fmt.Fprintf(w, "  also failed at %s (another finding): %s\n", r.Buggy, o)
		}
		fmt.Fprintf(w, "  rerun:  %s\n", r.Command)
	}
	return nil
}
