// Package defectmatrix is `ensemble defect-matrix`: it checks that a scenario suite detects every defect of
// its catalog (the pins.Catalog its suite.Options.Pins holds): it flips each entry in turn to the opposite of
// its default and reports whether the entry's own specs change verdict (a pin says "appears fixed" and
// fails, a positive assertion fails) and which other specs do.
//
// Usage (from any Go module whose suite boots ensemble; `make defect-matrix` runs this repository's):
//
//	ensemble defect-matrix [-suite DIR] [-ids ID,ID] [-operators LABEL,LABEL] [-report-dir DIR] [-seed N] [-timeout 20m]
//
// It compiles the suite once and runs it:
//
//  0. Once with pins.ListEnvVar set: suite.Boot writes the catalog of its Options.Pins and boots nothing, so
//     the catalog comes from the suite itself. A suite whose Pins is no pins.Catalog with entries has none
//     to flip, which the command says in one line (exit 0).
//  1. A dry run with a JSON report: the suite's specs and their labels. A catalog spec is a spec's full text
//     (its containers' texts and its own, joined by spaces) or "AfterSuite: what it checks" for the suite's
//     AfterSuite node. An entry none of whose specs is in the suite is an error line, and has no run.
//  2. The baseline: one run with every default, of the specs the entries' runs select. A spec failing there
//     is "failing unflipped" in the table, never counted as flipped.
//  3. Per entry, one run with ENSEMBLE_DEFECTS=ID=live (or =fixed) of the specs labelled with the operators
//     its specs belong to (the -operators labels they carry; the whole suite when one carries none, or
//     when -operators is empty). The suite's operators must read ENSEMBLE_DEFECTS (pins.Catalog.FromEnv).
//
// Every run uses the same -ginkgo.seed, so specs run in the same order. The table has a row per entry:
// ID | default | its specs | flipped? | other specs that flipped. With -report-dir the matrix is also written
// as DIR/defect-matrix.json, and the runs (suite.json, output.log, failure dumps) go under
// DIR/defect-matrix/; without it they go to a new temporary directory, which is kept and named when an
// entry flips none of its own specs or the matrix could not be made, and removed otherwise.
//
// Exit 1: an entry flips none of its own specs (each is named, with why); exit 2: the matrix could not be
// made (bad flags, the suite does not compile, a dry run or baseline without a report). An interrupt (ctx
// done) stops the run in progress (its suite stops its envtest), removes the temporary directory and exits 2.
package defectmatrix

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/onsi/ginkgo/v2/types"

	"github.com/ensembletest/ensemble/internal/cmdline"
	"github.com/ensembletest/ensemble/internal/ginkgoreport"
	"github.com/ensembletest/ensemble/internal/proc"
	"github.com/ensembletest/ensemble/internal/suitebin"
	"github.com/ensembletest/ensemble/internal/textout"
	"github.com/ensembletest/ensemble/pins"
)

// Synopsis is the command's usage line.
const Synopsis = "ensemble defect-matrix [-suite DIR] [-ids ID,ID] [-operators LABEL,LABEL] [-report-dir DIR] [-seed N] [-timeout 20m]"

// About is what the command does, in one line (ensemble -h lists it).
const About = "flip each defect of the suite's catalog (suite.Options.Pins) in turn and check that its own specs change verdict"

// about is -h's description, after the usage line.
const about = About + `.

The catalog comes from the suite: its test binary, run once with ` + pins.ListEnvVar + ` set, writes the
pins.Catalog its suite.Boot was given and boots nothing (a suite without one has nothing to flip). Each
entry's run sets ENSEMBLE_DEFECTS=ID=live or =fixed, the opposite of its default, which the suite's operators
must read (pins.Catalog.FromEnv). Exit 1 when an entry flips none of its own specs, 2 when the matrix could
not be made. The envtest binaries are found as the harness finds them (KUBEBUILDER_ASSETS, else
$XDG_DATA_HOME/kubebuilder-envtest/k8s/<version>-linux-amd64).`

// config is the command line.
type config struct {
	ids, operators   []string
	suite, reportDir string
	seed             int64
	timeout          time.Duration
}

// makeVars are the make variables that set the flags.
var makeVars = map[string]string{"ids": "IDS", "report-dir": "REPORT_DIR", "timeout": "SUITE_TIMEOUT"}

// Main runs the command with args (the words after "defect-matrix"), its output to stdout and its one-line
// errors to stderr, and returns the exit code. ctx ends the runs (an interrupt).
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fail := func(err error) int {
		fmt.Fprintf(stderr, "defect-matrix: %v\n", err)
		return 2
	}
	var c config
	var ids, operators string
	fs := flag.NewFlagSet("defect-matrix", flag.ContinueOnError)
	fs.StringVar(&c.suite, "suite", ".", "the Ginkgo suite's package directory")
	fs.StringVar(&ids, "ids", "", "comma-separated catalog IDs to flip (default: every entry)")
	fs.StringVar(&operators, "operators", "", "comma-separated Ginkgo labels that name an operator: an entry's run selects the specs of its specs' operators (default: none, each entry runs the whole suite)")
	fs.StringVar(&c.reportDir, "report-dir", "", "write defect-matrix.json and the runs' reports, outputs and dumps here")
	fs.Int64Var(&c.seed, "seed", 0, "Ginkgo random seed of every run (0: one from the clock)")
	fs.DurationVar(&c.timeout, "timeout", 20*time.Minute, "each run's -test.timeout")
	cmdline.Usage(fs, Synopsis, about)
	if code, ok := cmdline.Parsed(fs, args, makeVars, stderr, 2, func() error {
		c.ids, c.operators = split(ids), split(operators)
		if c.timeout <= 0 {
			return fmt.Errorf("-timeout (make's SUITE_TIMEOUT) is %s: pass each run's limit, such as 20m", c.timeout)
		}
		return nil
	}); !ok {
		return code
	}
	matrix, err := run(ctx, c, stdout)
	if ctx.Err() != nil {
		err = errors.New("interrupted: the run in progress is stopped and the temporary runs directory removed (-report-dir keeps the runs)")
	}
	if err != nil {
		return fail(err)
	}
	if matrix.Rows == nil {
		return 0 // the suite has no catalog, which run said
	}
	if len(matrix.Undetected) > 0 {
		fmt.Fprintf(stdout, "\n%d of %s flip none of their own specs: %s\n", len(matrix.Undetected), textout.Count(len(matrix.Rows), "entry", "entries"), strings.Join(matrix.Undetected, ", "))
		fmt.Fprintf(stdout, "each run's suite.json, output.log and failure dumps: %s\n", matrix.Runs)
		return 1
	}
	fmt.Fprintf(stdout, "\nevery entry flips one of its own specs (%s)\n", textout.Count(len(matrix.Rows), "entry", "entries"))
	return 0
}

// split is a comma-separated list without empty items.
func split(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// Matrix is the result, as the JSON file holds it.
type Matrix struct {
	// Seed is the Ginkgo random seed of every run.
	Seed int64
	// Baseline is the label filter of the unflipped run ("" for the whole suite).
	Baseline string
	// BaselineFailures are the nodes that failed with every default.
	BaselineFailures []string `json:",omitempty"`
	Rows             []Row
	// Undetected are the entries that flip none of their own specs, as "ID (why)".
	Undetected []string `json:",omitempty"`
	// Wall is the whole command's wall time.
	Wall string
	// Runs is the directory of the runs, "" once removed (a temporary one, when every entry flipped).
	Runs string `json:"-"`
}

// JSON is the matrix as the JSON file holds it: indented, "->" in spec names left as it is.
func (m Matrix) JSON() []byte {
	b, _ := textout.JSON(m) // a Matrix holds only strings, bools and numbers
	return b
}

// run makes the matrix, printing its progress and table to out. A suite without a catalog is a Matrix
// without Rows, said in one line.
func run(ctx context.Context, c config, out io.Writer) (Matrix, error) {
	start := time.Now()
	m := Matrix{Seed: c.seed}
	if v, ok := os.LookupEnv(pins.EnvVar); ok && v != "" {
		return m, fmt.Errorf("%s=%s is set: unset it, the matrix flips each entry from its catalog default itself", pins.EnvVar, v)
	}
	dir, err := suitebin.Dir(c.suite)
	if err != nil {
		return m, err
	}
	if _, err := suitebin.Assets(); err != nil {
		return m, err
	}
	if m.Seed == 0 {
		m.Seed = time.Now().Unix()
	}
	r, err := newRunner(c, dir, m.Seed)
	if err != nil {
		return m, err
	}
	r.ctx = ctx
	defer os.RemoveAll(filepath.Dir(r.bin))
	m.Runs = r.dir
	// A temporary runs directory stays only for a matrix that found something (or could not be made after a
	// run wrote into it).
	made := false
	defer func() {
		ents, _ := os.ReadDir(r.dir)
		if c.reportDir == "" && (ctx.Err() != nil || made && len(m.Undetected) == 0 || len(ents) == 0) {
			_ = os.RemoveAll(r.dir)
			m.Runs = ""
		}
	}()
	fmt.Fprintf(out, "compiling the suite in %s; runs under %s\n", r.suite, r.dir)
	if err := suitebin.Compile(ctx, r.suite, r.bin); err != nil {
		return m, err
	}
	listing, err := r.catalog()
	if err != nil {
		return m, err
	}
	if len(listing.Entries) == 0 {
		fmt.Fprintf(out, "the suite in %s has no defect catalog to flip: its suite.Options.Pins is %s, not a pins.Catalog with entries\n", r.suite, listing.Type)
		made = true
		return m, nil
	}
	catalog, err := selectEntries(listing.Entries, c.ids)
	if err != nil {
		return m, err
	}

	dry, err := r.dryRun()
	if err != nil {
		return m, err
	}
	x := index(dry)
	var plans []Plan
	for _, d := range catalog {
		plans = append(plans, plan(d, x, c.operators))
	}
	m.Baseline = baselineFilter(plans)
	fmt.Fprintf(out, "%s, seed %d; baseline: every default, label filter %s\n", textout.Count(len(plans), "catalog entry", "catalog entries"), m.Seed, describe(m.Baseline))
	base, err := r.run("baseline", m.Baseline, "")
	if ctx.Err() != nil {
		return m, ctx.Err()
	}
	if err != nil {
		return m, fmt.Errorf("the baseline run: %w", err)
	}
	baseStates := states(base.reports)
	for _, n := range x {
		if verdict(baseStates[n.Name]) == failed {
			m.BaselineFailures = append(m.BaselineFailures, n.Name)
		}
	}
	fmt.Fprintf(out, "baseline: %s\n", base.summary())
	for _, p := range plans {
		if !p.Runnable() {
			m.Rows = append(m.Rows, unjudged(p, missing(p)))
			fmt.Fprintf(out, "%s: not run: none of its specs is in the suite\n", p.ID)
			continue
		}
		res, err := r.run(p.ID, p.Filter, p.Defects())
		if ctx.Err() != nil {
			return m, ctx.Err()
		}
		if err != nil {
			m.Rows = append(m.Rows, unjudged(p, err.Error()))
			fmt.Fprintf(out, "%s=%s: %v\n", p.ID, p.Flip, err)
			continue
		}
		row, err := judge(p, x, baseStates, states(res.reports))
		if err != nil {
			return m, err
		}
		m.Rows = append(m.Rows, row)
		fmt.Fprintf(out, "%s=%s (label filter %s): %s\n", p.ID, p.Flip, describe(p.Filter), res.summary())
	}
	m.Undetected, made = undetected(m.Rows), true
	m.Wall = time.Since(start).Round(time.Second).String()

	fmt.Fprintln(out)
	if len(m.BaselineFailures) > 0 {
		fmt.Fprintf(out, "failing with every default (not counted as flipped): %s\n\n", strings.Join(m.BaselineFailures, "; "))
	}
	if err := table(out, m.Rows); err != nil {
		return m, err
	}
	if c.reportDir != "" || len(m.Undetected) > 0 {
		fmt.Fprintf(out, "\nwall time %s; each run's suite.json, output.log and failure dumps under %s\n", m.Wall, r.dir)
	} else {
		fmt.Fprintf(out, "\nwall time %s; the runs' directory %s is removed (-report-dir keeps the runs)\n", m.Wall, r.dir)
	}
	if c.reportDir != "" {
		p := filepath.Join(c.reportDir, "defect-matrix.json")
		if err := os.WriteFile(p, m.JSON(), 0o644); err != nil {
			return m, err
		}
		fmt.Fprintf(out, "the matrix as JSON: %s\n", p)
	}
	return m, nil
}

// selectEntries is the catalog, or its entries named in ids (in the catalog's order). Errors: an ID the
// catalog does not hold.
func selectEntries(c pins.Catalog, ids []string) (pins.Catalog, error) {
	if len(ids) == 0 {
		return c, nil
	}
	for _, id := range ids {
		if _, ok := c.Get(id); !ok {
			return nil, fmt.Errorf("-ids (make's IDS) names %q, which is not in the catalog: use some of %s", id, strings.Join(c.IDs(""), ", "))
		}
	}
	var out pins.Catalog
	for _, d := range c {
		if slices.Contains(ids, d.ID) {
			out = append(out, d)
		}
	}
	return out, nil
}

// describe prints a label filter, "none (the whole suite)" for "".
func describe(filter string) string {
	if filter == "" {
		return "none (the whole suite)"
	}
	return fmt.Sprintf("%q", filter)
}

// runner runs the compiled suite.
type runner struct {
	// bin is the compiled suite, alone in a temporary directory; dir holds a directory per run; suite is
	// the suite's package directory, where go test would run it.
	bin, dir, suite string
	seed            int64
	timeout         time.Duration
	// ctx ends the runs when the command is interrupted.
	ctx context.Context
}

// newRunner runs the suite in its package directory suite. It makes the directory the runs go to
// (-report-dir's defect-matrix/, or a new temporary one) and the one the compiled suite goes to.
func newRunner(c config, suite string, seed int64) (runner, error) {
	r := runner{suite: suite, seed: seed, timeout: c.timeout}
	var err error
	if c.reportDir != "" {
		r.dir = filepath.Join(c.reportDir, "defect-matrix")
		err = os.MkdirAll(r.dir, 0o755)
	} else {
		r.dir, err = os.MkdirTemp("", "ensemble-defect-matrix-")
	}
	if err != nil {
		return r, err
	}
	if r.dir, err = filepath.Abs(r.dir); err != nil {
		return r, err
	}
	// The compiled suite goes to a directory of its own, never among the reports CI uploads.
	bin, err := os.MkdirTemp("", "ensemble-defect-matrix-bin-")
	if err != nil {
		return r, err
	}
	r.bin = filepath.Join(bin, "suite.test")
	return r, nil
}

// catalogLimit bounds the run that lists the suite's catalog: it compiles nothing and boots nothing.
const catalogLimit = 2 * time.Minute

// catalog asks the compiled suite for its defect catalog: one run with pins.ListEnvVar set, in which
// suite.Boot writes the listing and fails the suite's BeforeSuite (the run's verdict is not read). Errors:
// the run wrote no listing (its BeforeSuite never reached suite.Boot), naming the end of its output.
func (r runner) catalog() (pins.Listing, error) {
	dir := filepath.Dir(r.bin)
	path := filepath.Join(dir, "pins.json")
	ctx, cancel := context.WithTimeout(r.ctx, catalogLimit)
	defer cancel()
	cmd := exec.Command(r.bin, "-test.timeout="+catalogLimit.String(), "-ginkgo.no-color")
	cmd.Dir = r.suite
	cmd.Env = append(os.Environ(), pins.ListEnvVar+"="+path, "ENSEMBLE_ARTIFACTS="+filepath.Join(dir, "artifacts"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	_ = proc.Run(ctx, cmd) // its BeforeSuite fails on purpose
	l, err := pins.ReadListing(path)
	if r.ctx.Err() != nil {
		return l, r.ctx.Err()
	}
	if errors.Is(err, os.ErrNotExist) {
		return l, fmt.Errorf("the suite wrote no pin catalog with %s set: its BeforeSuite never reached suite.Boot; the end of its output:\n%s", pins.ListEnvVar, suitebin.Tail(out.String(), 20))
	}
	return l, err
}

// dryRun lists the suite's specs without running any: a -ginkgo.dry-run report.
func (r runner) dryRun() ([]types.Report, error) {
	report := filepath.Join(r.dir, "dry-run.json")
	cmd := exec.Command(r.bin, "-ginkgo.dry-run", "-ginkgo.no-color", "-ginkgo.json-report="+report)
	cmd.Dir = r.suite
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := proc.Run(r.ctx, cmd); err != nil {
		return nil, fmt.Errorf("the suite's dry run: %v\n%s", err, out.String())
	}
	return ginkgoreport.Read(report)
}

// result is one run of the suite.
type result struct {
	reports []types.Report
	took    time.Duration
	code    int
}

// summary says how long the run took and how many of its specs passed and failed.
func (res result) summary() string {
	ran, bad := 0, 0
	for _, r := range res.reports {
		for _, sr := range r.SpecReports {
			if sr.LeafNodeType == types.NodeTypeIt && verdict(sr.State) != notRun {
				ran++
			}
			if sr.Failed() {
				bad++
			}
		}
	}
	return fmt.Sprintf("%s, %s ran, %s failed (exit %d)", res.took.Round(time.Second), textout.Count(ran, "spec", "specs"), textout.Count(bad, "node", "nodes"), res.code)
}

// run runs the suite's specs filter selects ("" for all) with ENSEMBLE_DEFECTS=defects, into dir/name/:
// suite.json, output.log, artifacts/. A failing suite is a result; an error is a run that wrote no report.
func (r runner) run(name, filter, defects string) (result, error) {
	dir := filepath.Join(r.dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return result{}, err
	}
	report, logPath := filepath.Join(dir, "suite.json"), filepath.Join(dir, "output.log")
	log, err := os.Create(logPath)
	if err != nil {
		return result{}, err
	}
	defer log.Close()
	args := []string{"-test.v", "-ginkgo.v", "-ginkgo.no-color", fmt.Sprintf("-ginkgo.seed=%d", r.seed)}
	if filter != "" {
		args = append(args, "-ginkgo.label-filter="+filter, "-ginkgo.fail-on-empty")
	}
	env := []string{pins.EnvVar + "=" + defects, "ENSEMBLE_ARTIFACTS=" + filepath.Join(dir, "artifacts")}
	run, err := ginkgoreport.RunSuite(r.ctx, r.bin, r.suite, args, env, r.timeout, report, log)
	res := result{reports: run.Reports, took: run.Took, code: run.Code}
	if err != nil {
		return res, fmt.Errorf("%w: its output is %s", err, logPath)
	}
	return res, nil
}
