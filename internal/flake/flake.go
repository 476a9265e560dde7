// Package flake is `ensemble flake`: it runs a scenario suite (or the specs a focus and a label filter
// select) N times, each run with its own Ginkgo JSON report and failure dumps, and stops at the first failing
// run: it prints that run's failures (spec, message, location, failure dump). When every run passes it prints
// "N/N passed" and each spec's min/median/max run time over the runs (ginkgoreport.Summary).
//
// Usage (from any Go module whose suite boots ensemble; `make flake` runs this repository's):
//
//	ensemble flake -n RUNS [-suite DIR] [-focus REGEXP] [-labels FILTER] [-report-dir DIR] [-timeout 20m] [-ginkgo-flags FLAGS]
//
// The suite is compiled once (go test -c in its directory); Ginkgo picks a new random order each run. Each
// run is <dir>/run-<i>/: suite.json (the JSON report), output.log (the verbose output) and artifacts/
// (ENSEMBLE_ARTIFACTS: failure dumps), where <dir> is -report-dir's flake-<time>/ or a new temporary
// directory, removed when every run passed or on an interrupt, kept and named when a run failed.
//
// Exit 0 when every run passed, 1 at the first failing run, 2 with one line on bad input or a suite that does
// not compile, 130 on an interrupt (ctx done: the run under way stops its envtest first).
package flake

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/onsi/ginkgo/v2/types"

	"github.com/ensembletest/ensemble/internal/cmdline"
	"github.com/ensembletest/ensemble/internal/ginkgoreport"
	"github.com/ensembletest/ensemble/internal/suitebin"
	"github.com/ensembletest/ensemble/internal/textout"
)

// Synopsis is the command's usage line.
const Synopsis = "ensemble flake -n RUNS [-suite DIR] [-focus REGEXP] [-labels FILTER] [-report-dir DIR] [-timeout 20m] [-ginkgo-flags FLAGS]"

// About is what the command does, in one line (ensemble -h lists it).
const About = "run the suite (or its focused specs) N times: the first failing run's failures, else N/N passed and per-spec run times"

// about is -h's description, after the usage line.
const about = About + `.

The suite is compiled once; each run has a new random order, its own JSON report, verbose output and
failure dumps under run-<i>/ of -report-dir's flake-<time>/ or of a temporary directory (removed when
every run passed, kept and named when one failed). Exit 0 when all passed, 1 at the first failing run.`

// makeVars are the make variables that set the flags.
var makeVars = map[string]string{"n": "N", "focus": "FOCUS", "labels": "LABELS", "report-dir": "REPORT_DIR",
	"timeout": "SUITE_TIMEOUT", "ginkgo-flags": "GINKGO_FLAGS"}

// config is the command line.
type config struct {
	runs                                         int
	suite, focus, labels, reportDir, ginkgoFlags string
	timeout                                      time.Duration
}

// Main runs the command with args (the words after "flake"), its output to stdout and its one-line errors to
// stderr, and returns the exit code. ctx ends the run under way (an interrupt).
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var c config
	fs := flag.NewFlagSet("flake", flag.ContinueOnError)
	fs.IntVar(&c.runs, "n", 0, "how many times to run the suite (required)")
	fs.StringVar(&c.suite, "suite", ".", "the Ginkgo suite's package directory")
	fs.StringVar(&c.focus, "focus", "", "Ginkgo focus regexp of the specs to run (default: every spec)")
	fs.StringVar(&c.labels, "labels", "", "Ginkgo label filter of the specs to run")
	fs.StringVar(&c.reportDir, "report-dir", "", "keep the runs under DIR/flake-<time>/ (default: a temporary directory)")
	fs.DurationVar(&c.timeout, "timeout", 20*time.Minute, "each run's -test.timeout")
	fs.StringVar(&c.ginkgoFlags, "ginkgo-flags", "", "more flags of the test binary, separated by spaces, such as -ginkgo.seed=1")
	cmdline.Usage(fs, Synopsis, about)
	if code, ok := cmdline.Parsed(fs, args, makeVars, stderr, 2, func() error { return check(c) }); !ok {
		return code
	}
	code, err := run(ctx, c, stdout)
	if err != nil {
		fmt.Fprintf(stderr, "flake: %v\n", err)
	}
	return code
}

// check refuses a command line that cannot make runs: no -n, or a non-positive -n or -timeout.
func check(c config) error {
	if c.runs < 1 {
		return fmt.Errorf("pass %s <runs>, how many times to run the suite, 1 or more, e.g. -n 10 -focus harness", cmdline.Name("n", makeVars))
	}
	if c.timeout <= 0 {
		return fmt.Errorf("%s is %s: pass each run's limit, such as 20m", cmdline.Name("timeout", makeVars), c.timeout)
	}
	return nil
}

// run compiles the suite and runs it c.runs times, printing to out. It returns the exit code, and an error
// for a code of 2 or 130 (what went wrong, said by Main in one line).
func run(ctx context.Context, c config, out io.Writer) (int, error) {
	dir, err := suitebin.Dir(c.suite)
	if err != nil {
		return 2, err
	}
	if _, err := suitebin.Assets(); err != nil {
		return 2, err
	}
	base, err := runsDir(c.reportDir)
	if err != nil {
		return 2, err
	}
	bin := filepath.Join(base, "suite.test")
	keep := c.reportDir != ""
	defer func() {
		_ = os.Remove(bin)
		if !keep {
			_ = os.RemoveAll(base)
		}
	}()
	interrupted := func() (int, error) {
		if keep {
			return 130, fmt.Errorf("interrupted; the runs so far are under %s", base)
		}
		return 130, fmt.Errorf("interrupted; the runs under %s are removed", base)
	}

	var filters []string
	if c.focus != "" {
		filters = append(filters, "-ginkgo.focus="+c.focus)
	}
	if c.labels != "" {
		filters = append(filters, "-ginkgo.label-filter="+c.labels)
	}
	// A filter that selects nothing must not pass N times.
	if len(filters) > 0 {
		filters = append(filters, "-ginkgo.fail-on-empty")
	}
	what := describe(c, dir)

	fmt.Fprintf(out, "compiling the suite in %s...\n", dir)
	if err := suitebin.Compile(ctx, dir, bin); err != nil {
		if ctx.Err() != nil {
			return interrupted()
		}
		return 2, err
	}
	fmt.Fprintf(out, "running %s %s; runs under %s\n", what, textout.Count(c.runs, "time", "times"), base)
	root, _ := os.Getwd()
	args := append([]string{"-test.v", "-ginkgo.v"}, filters...)
	args = append(args, strings.Fields(c.ginkgoFlags)...)
	total := time.Now()
	var reports []string
	for i := 1; i <= c.runs; i++ {
		runDir := filepath.Join(base, fmt.Sprintf("run-%d", i))
		if err := os.MkdirAll(runDir, 0o755); err != nil {
			return 2, err
		}
		logPath, report, artifacts := filepath.Join(runDir, "output.log"), filepath.Join(runDir, "suite.json"), filepath.Join(runDir, "artifacts")
		log, err := os.Create(logPath)
		if err != nil {
			return 2, err
		}
		res, runErr := ginkgoreport.RunSuite(ctx, bin, dir, args, []string{"ENSEMBLE_ARTIFACTS=" + artifacts}, c.timeout, report, log)
		log.Close()
		if ctx.Err() != nil {
			return interrupted()
		}
		ran := "?"
		if runErr == nil {
			ran = fmt.Sprint(len(ginkgoreport.Ran(res.Reports)))
		}
		took := res.Took.Round(time.Second)
		if runErr == nil && res.Code == 0 {
			fmt.Fprintf(out, "run %d/%d: passed in %s (%s)\n", i, c.runs, took, specs(ran))
			reports = append(reports, report)
			continue
		}
		keep = true
		fmt.Fprintf(out, "run %d/%d: FAILED in %s (%s ran; %d of %d runs passed before it)\n\n", i, c.runs, took, specs(ran), i-1, c.runs)
		failed(out, res.Reports, root, logPath)
		if ran == "0" {
			fmt.Fprintf(out, "  (%s select no spec: check -focus and -labels)\n", what)
		}
		fmt.Fprintln(out)
		if ents, _ := os.ReadDir(artifacts); len(ents) > 0 {
			fmt.Fprintf(out, "failure dumps of run %d (ENSEMBLE_ARTIFACTS): %s (%d written)\n", i, artifacts, len(ents))
		} else {
			fmt.Fprintf(out, "failure dumps of run %d: none written under %s (a suite-level failure dumps nothing)\n", i, artifacts)
		}
		fmt.Fprintf(out, "run %d's verbose output: %s; its JSON report: %s\n", i, logPath, report)
		return 1, nil
	}
	took := time.Since(total).Round(time.Second)
	if c.reportDir != "" {
		fmt.Fprintf(out, "%d/%d passed in %s (%s; reports: %s/run-<i>/suite.json)\n\n", c.runs, c.runs, took, what, base)
	} else {
		fmt.Fprintf(out, "%d/%d passed in %s (%s; the runs under %s are removed: -report-dir keeps them)\n\n", c.runs, c.runs, took, what, base)
	}
	var runs [][]types.Report
	for _, p := range reports {
		r, err := ginkgoreport.Read(p)
		if err != nil {
			return 2, err
		}
		runs = append(runs, r)
	}
	ginkgoreport.Summary(out, runs)
	return 0, nil
}

// runsDir makes the directory of the runs: reportDir's flake-<time>/, or a new temporary directory.
func runsDir(reportDir string) (string, error) {
	if reportDir == "" {
		return os.MkdirTemp("", "ensemble-flake-")
	}
	abs, err := filepath.Abs(filepath.Join(reportDir, "flake-"+time.Now().Format("20060102-150405")))
	if err != nil {
		return "", err
	}
	return abs, os.MkdirAll(abs, 0o755)
}

// describe names what the runs run: the suite, or the specs of the focus and label filter.
func describe(c config, dir string) string {
	var sel []string
	if c.focus != "" {
		sel = append(sel, fmt.Sprintf("-focus '%s'", c.focus))
	}
	if c.labels != "" {
		sel = append(sel, fmt.Sprintf("-labels '%s'", c.labels))
	}
	if len(sel) == 0 {
		return "the suite in " + dir
	}
	return "the specs of " + strings.Join(sel, " and ")
}

// specs prints a count of specs that may be unknown ("?").
func specs(n string) string {
	if n == "1" {
		return "1 spec"
	}
	return n + " specs"
}

// failed prints a failed run's failures, indented, from its JSON report; without a failed node there, the
// end of its output.
func failed(out io.Writer, reports []types.Report, root, logPath string) {
	var b bytes.Buffer
	if len(reports) > 0 && ginkgoreport.Failures(&b, reports, root, 60) > 0 {
		fmt.Fprint(out, indent(b.String(), "  "))
		return
	}
	fmt.Fprintln(out, "  no failed spec in the JSON report; the end of the output:")
	log, _ := os.ReadFile(logPath)
	fmt.Fprint(out, indent(suitebin.Tail(string(log), 30)+"\n", "    "))
}

// indent prefixes every line of s (which ends in a newline) with prefix.
func indent(s, prefix string) string {
	lines := strings.SplitAfter(s, "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = prefix + l
		}
	}
	return strings.Join(lines, "")
}
