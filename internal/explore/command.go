// Package explore is `ensemble explore`: it perturbs the specs a focus selects, one perturbation point at a time, and reports which
// points make a spec fail: its assertions, its oracles, or the differential oracle, which fails a case whose
// end state differs from the unperturbed runs'. See docs/architecture.md §3 Perturbation.
//
// Usage (from the module that holds the suite; `make explore` runs this repository's scenarios):
//
//	ensemble explore -focus REGEXP [-suite .] [-modes conflict,timeout,...|all] [-budget 40|20m] [-batch 10]
//	    [-lag 15s] [-until REGEXP]... [-points 'POINT ...'] [-shard i/n] [-repeat N] [-j 1] [-report-dir DIR] [-timeout 20m] [-make]
//	ensemble explore -merge 'DIR/explore.json ...' -report-dir DIR
//
// It compiles the suite's test binary once (go test -c in the suite's directory, so a suite that is a Go
// module of its own, such as ./examples/kuberay, builds too) and runs it:
//
//  1. The focused specs unperturbed, twice (baseline-1, baseline-2), each case writing its perturb.Record
//     (ENSEMBLE_EXPLORE). Both must pass: a spec that fails unperturbed cannot be judged.
//  2. The points, from baseline-1's records: for each spec, each (writer, object) pair of its operators' and
//     fakes' writes, each mode (down and slow once per external system), each k = 1..n of the pair's n
//     writes, the point mode@writer:Kind/name#k. Only objects baseline-2 wrote too get points (a name made
//     anew each run, as by generateName, could not be named again), n the smaller of the two counts. Then,
//     for the modes among -modes that act on a manager's view (restart, stale, coalesce), the change points:
//     for each object whose changes both baselines saw and each manager that wrote in the spec, each k up to
//     the changes that manager's watch could deliver (perturb.Record.Seen), the point mode@manager:Kind/name^k.
//     An object named anew each run gets the points mode@writer:Kind/*j#k instead, the writer's j-th object
//     of that kind (in the order of its first write to each), where in both baselines the writer's j-th
//     object of the kind was named anew, k up to the smaller count of writes on it.
//     Each stale point comes twice: held until the namespace is quiet, and held for -lag (stale...+15s), an
//     informer lagging behind the API server for longer than operators commonly wait for their own cache.
//     The budget takes them in an order that spreads them over specs, writers, modes and objects before it
//     takes any twice (see sampler); -points skips this. Pruning (on unless -prune=false) first leaves out
//     each point a kept one stands for: points of one mode whose triggers follow one another with nothing
//     between them, in both baselines, that could tell their effects apart (no write of the object by
//     another writer, no read of it by a reader the mode could affect; see prune), keeping the first.
//  3. The points, on their spec alone (a focus anchored to its full text), -batch runs of one spec in one
//     test process: ENSEMBLE_PERTURB=point|point|..., a run of the spec each (suite.Runs), with
//     ENSEMBLE_BASELINE=the two baselines' records. Ginkgo ends the process at the first failing run; the
//     points after it go to the next process. Each run's record (perturb.Record.Run) judges it: pass, fail,
//     not reached (the point never fired) or error (the run could not be judged). Its failure and first
//     difference are the spec's own failure's first line when the spec failed before its case's cleanup
//     (perturb.Record.SpecFailed: the oracles after it judged an end state that never settled, and the
//     differential oracle's first field, when it failed, is kept as the row's Differential); otherwise its
//     first difference is the differential oracle's first field, else the failure's first line.
//
// -until REGEXP, given once or more, stops taking points once each regexp has matched the failure or first
// difference of a failing point (the points under way finish), and says for each the first point, in the
// rows' order, that it matched: which, its place among the rows (how many points it took), and when its
// verdict came (Exploration.Until).
//
// It prints the table (point | mode | verdict | first difference), the wall time per point, and for each
// failing point the timeline the harness wrote and the one command that reruns exactly that point (go run
// ... explore -focus -points, or with -make the make explore line of a Makefile that wraps the command). Every
// run's directory (records/, artifacts/, suite.json, output.log) and explore.json, the rows whole, are
// under -report-dir; without it, under a new temporary directory, named in the output, kept when a point
// failed, erred or disagreed with itself (or a baseline failed) and removed otherwise, or on interrupt.
//
// -shard i/n runs the i-th of n parts of the points the budget takes (every n-th, from the i-th), after the
// same unperturbed runs; each row keeps its place in the whole run (Row.Index). -merge joins the explore.json
// of every shard of one run into one table and one explore.json under -report-dir, as one run of the whole
// budget would have made them; it refuses files that are not all the shards of one run.
//
// Exit 0 when the exploration ran, whatever the verdicts (a failing point is a finding, not an error of the
// command); exit 2 with one line on bad input, a suite that does not compile, or a baseline that fails.
// SIGINT or SIGTERM stops the runs (proc.Run), prints the points that ended and exits 0.
package explore

import (
	"bytes"
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
	"sync"
	"time"

	"github.com/onsi/ginkgo/v2/types"

	"github.com/ensembletest/ensemble/internal/cmdline"
	"github.com/ensembletest/ensemble/internal/ginkgoreport"
	"github.com/ensembletest/ensemble/internal/proc"
	"github.com/ensembletest/ensemble/internal/suitebin"
	"github.com/ensembletest/ensemble/internal/textout"
	"github.com/ensembletest/ensemble/suite/perturb"
)

// config is the command line.
type config struct {
	suite, focus, modes, budget, points, reportDir string
	repeat, jobs                                   int
	// batch is -batch: how many runs of points of one spec one test process makes.
	batch        int
	timeout, lag time.Duration
	// until is -until, each time given: taking points stops once each has matched a failing point (none:
	// never stops).
	until untilFlags
	// shard is -shard ("i/n", "" for all the points); merge is -merge's explore.json files; from is -from,
	// a previous run's directory whose unperturbed runs this one takes instead of running its own.
	shard, merge, from string
	// viaMake is -make: rerun commands are written as make explore lines (this repository's Makefile).
	viaMake bool
	// prune is -prune: the enumeration leaves out the points a kept point stands for (see prune).
	prune bool
	// bin is a compiled test binary of suite to run instead of compiling one (the tests' fake suite).
	bin string
}

// Synopsis is the command's usage line.
const Synopsis = "ensemble explore -focus REGEXP [-suite DIR] [-modes a,b|all] [-budget 40|20m] [-batch 10] [-lag 15s] [-until REGEXP]... [-points 'POINT ...'] [-shard i/n] [-from DIR] [-prune=false] [-repeat N] [-j 1] [-report-dir DIR] [-timeout 20m] [-make]\n       ensemble explore -merge 'DIR/explore.json ...' -report-dir DIR"

// About is what the command does, in one line (ensemble -h lists it).
const About = "perturb the focused specs one point at a time and compare with their unperturbed runs"

// about is -h's description, after the usage line.
const about = About + `: point | mode | verdict | first
difference, with the command that reruns each failing point.

It runs the focused specs unperturbed twice, enumerates the points of their writes and changes, and runs as
many as -budget allows, -batch points of a spec in one test process (the suite hands suite.Runs() to
Ginkgo's MustPassRepeatedly). Exit 0 when the exploration ran, whatever the verdicts; 2 with one line on
bad input, a suite that does not compile, or a baseline that fails.`

// Main runs the command with args (the words after "explore"), its output to stdout and its one-line errors
// to stderr, and returns the exit code. ctx ends the runs under way (an interrupt); the points that ended are
// still reported.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var c config
	fs := flag.NewFlagSet("explore", flag.ContinueOnError)
	fs.StringVar(&c.suite, "suite", ".", "the Ginkgo suite's package directory (a module of its own works too)")
	fs.StringVar(&c.focus, "focus", "", "Ginkgo focus regexp of the specs to perturb (required)")
	fs.StringVar(&c.modes, "modes", defaultModes, "comma-separated modes of the enumerated points, or all")
	fs.StringVar(&c.budget, "budget", "40", "how many enumerated points run: a number, or a duration such as 20m")
	fs.IntVar(&c.batch, "batch", defaultBatch, "runs of points of one spec in one test process, one after another (1: a process each)")
	fs.DurationVar(&c.lag, "lag", defaultLag, "how long the lagged stale points hold their object from the writer's manager (0: none)")
	fs.Var(&c.until, "until", "stop taking points once a point fails with a failure (the spec's own or an oracle's) or first difference this `regexp` matches (. for any failure; the points under way finish), and say which point it was, how many points it took and when; given more than once, once each regexp has matched a failing point")
	fs.StringVar(&c.shard, "shard", "", "run the i-th of n parts of the points, as i/n (a matrix job each; -merge joins them)")
	fs.StringVar(&c.from, "from", "", "take the unperturbed runs (baseline-1, baseline-2) of this earlier run's -report-dir instead of running them, so shards enumerate the same points (-budget 0 makes one)")
	fs.StringVar(&c.merge, "merge", "", "join these shards' explore.json files (separated by spaces) into one table and explore.json under -report-dir, running nothing")
	fs.StringVar(&c.points, "points", "", "run these points (perturb.Parse's form, separated by spaces) on every focused spec instead of enumerating; -budget does not apply")
	fs.IntVar(&c.repeat, "repeat", 1, "run each point this many times and report whether the verdicts agree")
	fs.IntVar(&c.jobs, "j", 1, "test processes at once")
	fs.StringVar(&c.reportDir, "report-dir", "", "directory of the runs and explore.json (default: a new temporary directory)")
	fs.DurationVar(&c.timeout, "timeout", 20*time.Minute, "each test process's -test.timeout")
	fs.BoolVar(&c.prune, "prune", true, "leave out each point whose trigger the unperturbed runs show to be equivalent to an earlier one's: nothing that could tell their effects apart happened between them (-prune=false runs the whole enumeration)")
	fs.BoolVar(&c.viaMake, "make", false, "write each rerun command as a make explore line (FOCUS=, POINTS=, SUITE=), for a Makefile that wraps the command as this repository's does")
	cmdline.Usage(fs, Synopsis, about)
	merging := func() bool { return strings.TrimSpace(c.merge) != "" }
	if code, ok := cmdline.Parsed(fs, args, makeVars, stderr, 2, func() error {
		if merging() {
			return nil
		}
		_, err := check(c)
		return err
	}); !ok {
		return code
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "explore: %v\n", err)
		return 2
	}
	if merging() {
		if _, err := mergeShards(strings.Fields(c.merge), c.reportDir, stdout); err != nil {
			return fail(err)
		}
		return 0
	}
	assets, err := suitebin.Assets()
	if err != nil {
		return fail(err)
	}
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		_ = os.Setenv("KUBEBUILDER_ASSETS", assets)
	}
	if _, err := run(ctx, c, stdout); err != nil {
		return fail(err)
	}
	return 0
}

// makeVars are the make variables that set the flags.
var makeVars = map[string]string{"batch": "BATCH", "suite": "SUITE", "focus": "FOCUS", "modes": "MODES", "budget": "BUDGET", "points": "POINTS",
	"repeat": "REPEAT", "j": "EXPLORE_JOBS", "report-dir": "REPORT_DIR", "timeout": "SUITE_TIMEOUT", "lag": "LAG", "until": "UNTIL", "prune": "PRUNE",
	"shard": "SHARD", "merge": "MERGE", "from": "FROM"}

// plan is the command line, read.
type plan struct {
	modes  []perturb.Mode
	budget Budget
	// lag is -lag: the hold of the lagged stale points (0: none are made).
	lag time.Duration
	// shard, of, are -shard's i and n (1 and 1 without it).
	shard, of int
	// until are -until's regexps, compiled, in the order given (none: never stop early).
	until []*regexp.Regexp
	// points are -points' (nil: enumerate).
	points []perturb.Point
	// prune is -prune.
	prune bool
}

// check reads the command line. Errors: no focus or one that is no regexp, modes, budget or points that do
// not parse, a repeat or job count below 1, a timeout that is not positive.
func check(c config) (plan, error) {
	var p plan
	if strings.TrimSpace(c.focus) == "" {
		return p, errors.New("-focus (make's FOCUS) is required: a Ginkgo focus regexp of the specs to perturb, e.g. FOCUS='becomes Healthy'")
	}
	if _, err := regexp.Compile(c.focus); err != nil {
		return p, fmt.Errorf("-focus (make's FOCUS) %q is not a regexp: %w", c.focus, err)
	}
	var err error
	if p.modes, err = parseModes(c.modes); err != nil {
		return p, err
	}
	if p.budget, err = parseBudget(c.budget); err != nil {
		return p, err
	}
	if strings.TrimSpace(c.points) != "" {
		if p.points, err = perturb.ParseList(c.points); err != nil {
			return p, fmt.Errorf("-points (make's POINTS): %w", err)
		}
	}
	if c.repeat < 1 {
		return p, fmt.Errorf("-repeat (make's REPEAT) is %d: pass a number of runs per point, 1 or more", c.repeat)
	}
	if c.batch < 1 {
		return p, fmt.Errorf("-batch (make's BATCH) is %d: pass how many points of a spec one test process runs, 1 or more", c.batch)
	}
	if c.jobs < 1 {
		return p, fmt.Errorf("-j (make's EXPLORE_JOBS) is %d: pass a number of runs at once, 1 or more", c.jobs)
	}
	if c.timeout <= 0 {
		return p, fmt.Errorf("-timeout (make's SUITE_TIMEOUT) is %s: pass each run's limit, such as 20m", c.timeout)
	}
	for _, u := range c.until {
		re, err := regexp.Compile(u)
		if err != nil {
			return p, fmt.Errorf("-until (make's UNTIL) %q is not a regexp: %w", u, err)
		}
		p.until = append(p.until, re)
	}
	if p.shard, p.of, err = parseShard(c.shard); err != nil {
		return p, err
	}
	if c.lag < 0 {
		return p, fmt.Errorf("-lag (make's LAG) is %s: pass how long a lagged stale point holds, such as 15s, or 0 for none", c.lag)
	}
	p.lag = c.lag
	p.prune = c.prune
	return p, nil
}

// untilFlags is -until's value: every regexp given, in order (the flag may be given more than once).
type untilFlags []string

// String joins the regexps with spaces, for the flag package.
func (u *untilFlags) String() string { return strings.Join(*u, " ") }

// Set adds one more regexp; check compiles them.
func (u *untilFlags) Set(s string) error {
	*u = append(*u, s)
	return nil
}

// Found is what one -until regexp came to: the first row, in the rows' order, whose point failed with a
// failure (any of its failures) or first difference it matches (see matches).
type Found struct {
	Until string
	// Point is that row's point, "" when no failing row matched; Tried is its place among the rows, from 1
	// (how many points it took to find it); Elapsed is the wall time from the command's start to its
	// verdict, compile and unperturbed runs included.
	Point   string   `json:",omitempty"`
	Tried   int      `json:",omitempty"`
	Elapsed Duration `json:",omitempty"`
}

// matches says row failed with a failure, first difference, differential field or other failure re
// matches.
func matches(re *regexp.Regexp, row Row) bool {
	return row.Verdict == Fail && re.MatchString(strings.Join(append([]string{row.Failure, row.Difference, row.Differential}, row.Others...), "\n"))
}

// found is what each of until came to over rows (in their order).
func found(until []*regexp.Regexp, rows []Row) []Found {
	var out []Found
	for _, re := range until {
		f := Found{Until: re.String()}
		if i := slices.IndexFunc(rows, func(r Row) bool { return matches(re, r) }); i >= 0 {
			f.Point, f.Tried, f.Elapsed = rows[i].Point, i+1, rows[i].Elapsed
		}
		out = append(out, f)
	}
	return out
}

// unnamedShown is how many of the pairs without a point by name the output names; explore.json has them all.
const unnamedShown = 5

// Exploration is the result, as explore.json holds it.
type Exploration struct {
	Suite, Focus string
	Modes        []perturb.Mode `json:",omitempty"`
	Budget       string         `json:",omitempty"`
	// Shard is -shard's i/n when the run was one part of the points; empty for a whole run.
	Shard string `json:",omitempty"`
	// Existed is how many points the enumeration made and kept (every one with -prune=false); Ran how many
	// of them (or of -points, per spec) ran.
	Existed, Ran int
	// Enumerated is how many points the enumeration made before pruning; Pruned are those it left out, each
	// with the kept point that stands for it (none with -prune=false or -points).
	Enumerated int      `json:",omitempty"`
	Pruned     []Pruned `json:",omitempty"`
	// Unnamed are the writer-object pairs that got no point by name, each "spec: writer on Kind/name" or
	// "spec: the changes of Kind/name": objects the second unperturbed run did not have (named anew each run),
	// which get points by their place among their writer's objects of their kind instead.
	Unnamed []string `json:",omitempty"`
	// Baselines are the two unperturbed runs' record directories.
	Baselines []string
	Rows      []Row
	// Until is what each -until regexp came to, in the order given (none without -until).
	Until []Found `json:",omitempty"`
	// Wall is the whole command's wall time.
	Wall Duration
}

// run is the command: it checks the command line, compiles the suite (unless -bin names it), then runs the
// phases baselines, choosePoints and runPoints, and prints the table and report and writes explore.json.
// It returns what it explored, as far as it got. Errors: check's, a compile or baseline failure, a table or
// JSON that cannot be written.
func run(ctx context.Context, c config, out io.Writer) (Exploration, error) {
	start := time.Now()
	x := Exploration{Suite: cleanSuite(c.suite), Focus: c.focus}
	p, err := check(c)
	if err != nil {
		return x, err
	}
	r, err := newRunner(c)
	if err != nil {
		return x, err
	}
	defer r.close()
	// A temporary directory goes when the command is interrupted; the end decides otherwise.
	defer func() {
		if r.temp && ctx.Err() != nil {
			r.remove(out, "interrupted")
		}
	}()
	fmt.Fprintf(out, "runs under %s\n", r.dir)
	if c.bin == "" {
		fmt.Fprintf(out, "compiling %s\n", x.Suite)
		if err := r.compile(ctx); err != nil {
			return x, err
		}
	}

	// 1. The baselines; 2. the points; 3. each point on its spec alone; 4. the table, the JSON, the directory.
	records, second, desc, err := baselines(ctx, c, r, &x, out)
	if err != nil {
		return x, err
	}
	todo, smp := choosePoints(p, records, second, &x, out)
	todo = shardOf(todo, p.shard, p.of)
	if p.of > 1 {
		x.Shard = fmt.Sprintf("%d/%d", p.shard, p.of)
		if smp == nil {
			fmt.Fprintf(out, "shard %s runs %s of them\n", x.Shard, textout.Count(len(todo), "point", "points"))
		}
	}
	took, pointsStart, err := runPoints(ctx, c, r, p, &x, todo, smp, desc, start, out)
	if err != nil {
		return x, err
	}
	x.Ran = len(x.Rows)
	x.Until = found(p.until, x.Rows)
	x.Wall = Duration(time.Since(start))
	if ctx.Err() != nil {
		fmt.Fprintf(out, "interrupted: the points that were running have verdict error\n")
	}

	fmt.Fprintln(out)
	if err := table(out, x.Rows); err != nil {
		return x, err
	}
	report(out, x, took, time.Since(pointsStart), c.repeat)
	path := filepath.Join(r.dir, "explore.json")
	js, err := textout.JSON(x)
	if err != nil {
		return x, err
	}
	if err := os.WriteFile(path, js, 0o644); err != nil {
		return x, err
	}
	switch {
	case !r.temp || (ctx.Err() == nil && findings(x.Rows)):
		fmt.Fprintf(out, "every row as JSON: %s\n", path)
	case ctx.Err() == nil:
		r.remove(out, "no point failed, erred or disagreed")
	}
	return x, nil
}

// baselines runs phase 1: the focused specs twice, unperturbed, in parallel when -j allows. It returns the
// first run's records of the specs that ran, the second's (to tell which writes every run makes), and the
// suite's description (for the focus of a point's rerun); x.Baselines gets the two record directories.
// Errors: an interruption, a baseline that failed or wrote no record, no spec that wrote one.
func baselines(ctx context.Context, c config, r *runner, x *Exploration, out io.Writer) (records, second []perturb.Record, desc string, err error) {
	bases := []string{"baseline-1", "baseline-2"}
	var baseRuns [2]runResult
	if c.from != "" {
		// An earlier run's: every shard of a sweep enumerates from the same records.
		for i, b := range bases {
			dir, err := filepath.Abs(filepath.Join(c.from, b))
			if err != nil {
				return nil, nil, "", err
			}
			baseRuns[i] = runResult{dir: dir, records: filepath.Join(dir, "records")}
			if baseRuns[i].Reports, err = ginkgoreport.Read(filepath.Join(dir, "suite.json")); err != nil {
				return nil, nil, "", fmt.Errorf("-from (make's FROM) %s has no unperturbed run %s (%v): pass the -report-dir of an earlier make explore, such as one with BUDGET=0", c.from, b, err)
			}
		}
	} else {
		parallel(min(c.jobs, 2), 2, func(i int) {
			baseRuns[i] = r.run(ctx, filepath.Join(r.dir, bases[i]), c.focus, "", "")
		})
	}
	for i, res := range baseRuns {
		if ctx.Err() != nil {
			return nil, nil, "", errors.New("interrupted during the baselines")
		}
		if err := res.baselineError(bases[i], c.focus, x.Suite); err != nil {
			return nil, nil, "", err
		}
		if recs, err := perturb.ReadRecords(res.records); err != nil || len(recs) == 0 {
			return nil, nil, "", fmt.Errorf("%s wrote no record under %s (%v): this suite's harness does not write ENSEMBLE_EXPLORE's records yet, or its focused specs make no suite.Case", bases[i], res.records, err)
		}
		fmt.Fprintf(out, "%s: %s passed in %s\n", bases[i], textout.Count(res.ran(), "spec", "specs"), res.Took.Round(time.Second))
		x.Baselines = append(x.Baselines, res.records)
	}
	records, err = perturb.ReadRecords(baseRuns[0].records)
	if err != nil {
		return nil, nil, "", fmt.Errorf("baseline-1: %w", err)
	}
	second, err = perturb.ReadRecords(baseRuns[1].records)
	if err != nil {
		return nil, nil, "", fmt.Errorf("baseline-2: %w", err)
	}
	desc = baseRuns[0].description()
	specs := baseRuns[0].specs()
	records, left := ofSpecs(records, specs)
	if len(left) > 0 {
		fmt.Fprintf(out, "not explored: %s of no spec that ran (a suite node's case, such as a sentinel's), namespaces %s\n",
			textout.Count(len(left), "record", "records"), strings.Join(left, ", "))
	}
	if c.from != "" {
		// The plan may hold more specs than -focus selects: explore those it selects, as Ginkgo would.
		if specs, err = focused(c.focus, desc, specs); err != nil {
			return nil, nil, "", fmt.Errorf("-from (make's FROM) %s: %w", c.from, err)
		}
		records, _ = ofSpecs(records, specs)
		second, _ = ofSpecs(second, specs)
	}
	for _, s := range specs {
		if !hasSpec(records, s) {
			fmt.Fprintf(out, "not explored: %q wrote no record (it makes no suite.Case)\n", s)
		}
	}
	if len(records) == 0 {
		return nil, nil, "", errors.New("no spec that ran wrote a record: there is nothing to perturb")
	}

	return records, second, desc, nil
}

// focused keeps the specs of the suite described desc that the Ginkgo focus regexp selects (it matches the
// description and the spec's full text joined by a space). Errors: a focus that does not compile, or one
// that selects none of them.
func focused(focus, desc string, specs []string) ([]string, error) {
	re, err := regexp.Compile(focus)
	if err != nil {
		return nil, fmt.Errorf("-focus %q: %w", focus, err)
	}
	var out []string
	for _, s := range specs {
		if re.MatchString(desc + " " + s) {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("its unperturbed runs hold %s, and -focus %q selects none of them: pass the -focus the plan was made with, or make a plan with this one (-budget 0)",
			textout.Count(len(specs), "spec", "specs"), focus)
	}
	return out, nil
}

// choosePoints runs phase 2: the points -points gives, on every spec, or the enumeration of every point over
// the baselines' writes and changes, taken in the sampler's order as far as a point budget goes (todo) or
// handed out while a time budget lasts (smp, nil with a point budget or -points). It says on out what it
// could not explore and sets x's counts.
func choosePoints(p plan, records, second []perturb.Record, x *Exploration, out io.Writer) (todo []SpecPoint, smp *sampler) {
	if p.points != nil {
		for _, spec := range specNames(records) {
			for _, pt := range p.points {
				todo = append(todo, SpecPoint{Spec: spec, Point: pt})
			}
		}
		x.Existed = len(todo)
		fmt.Fprintf(out, "%s given, on %s: %s runs\n", textout.Count(len(p.points), "point", "points"),
			textout.Count(len(specNames(records)), "spec", "specs"), textout.Count(len(todo), "point", "points"))
	} else {
		e := enumerate(records, second, p.modes)
		e.addLagged(p.lag)
		x.Enumerated = len(e.Points)
		if p.prune {
			e.Points, x.Pruned = prune(e.Points, records, second)
		}
		x.Modes, x.Budget, x.Existed = p.modes, p.budget.String(), len(e.Points)
		fmt.Fprintf(out, "enumerated %s, pruned %d, kept %d%s\n", textout.Count(x.Enumerated, "point", "points"), len(x.Pruned), x.Existed, pruneNote(p.prune, records, second))
		for _, s := range e.NoWrites {
			fmt.Fprintf(out, "not explored: %q has no write by an operator or fake\n", s)
		}
		for _, u := range e.Unparsable {
			fmt.Fprintf(out, "no point for %s: the point form cannot name it (a create by generateName has no name yet)\n", u)
		}
		if len(e.Unstable) > 0 {
			x.Unnamed = e.Unstable
			shown, more := e.Unstable, ""
			if len(shown) > unnamedShown {
				shown, more = shown[:unnamedShown], fmt.Sprintf("; and %d more (explore.json's Unnamed lists them all)", len(e.Unstable)-unnamedShown)
			}
			fmt.Fprintf(out, "no point by name for %s on objects baseline-2 did not write (named anew each run, as by generateName; one gets points by its place among its writer's objects of its kind, Kind/*k, where both runs have one there): %s%s\n",
				textout.Count(len(e.Unstable), "pair", "pairs"), strings.Join(shown, "; "), more)
		}
		smp = newSampler(e.Points)
		if p.budget.Time == 0 {
			for len(todo) < p.budget.Points {
				sp, ok := smp.next()
				if !ok {
					break
				}
				todo = append(todo, sp)
			}
			smp = nil
			fmt.Fprintf(out, "%s over %s (modes %s); the budget of %s runs %d\n", textout.Count(x.Existed, "point", "points"),
				textout.Count(len(specNames(records)), "spec", "specs"), joinModes(p.modes), textout.Count(p.budget.Points, "point", "points"), len(todo))
		} else {
			fmt.Fprintf(out, "%s over %s (modes %s); the budget of %s runs as many as start within it\n", textout.Count(x.Existed, "point", "points"),
				textout.Count(len(specNames(records)), "spec", "specs"), joinModes(p.modes), p.budget.Time)
		}
	}

	return todo, smp
}

// findings says a row has something to look at in its run directory: a failure, an error, verdicts that
// disagree, a failure without the point firing, or a suite node's failure.
func findings(rows []Row) bool {
	for _, r := range rows {
		if r.Verdict == Fail || r.Verdict == Error || !r.Agree || r.Failure != "" || r.Suite != "" {
			return true
		}
	}
	return false
}

// report prints what follows the table: the counts, the wall times, the disagreeing points, and for each
// failing point its timeline and the command that reruns it.
func report(out io.Writer, x Exploration, took []time.Duration, pointsWall time.Duration, repeat int) {
	verdicts := map[string]int{}
	for _, r := range x.Rows {
		verdicts[r.Verdict]++
	}
	fmt.Fprintf(out, "\n%d of %s ran: %d pass, %d fail, %d not reached, %d error\n", x.Ran, textout.Count(x.Existed, "point", "points"),
		verdicts[Pass], verdicts[Fail], verdicts[NotReached], verdicts[Error])
	fmt.Fprintf(out, "wall time per run: %s; the points in all %s; the whole command %s\n", spread(took),
		pointsWall.Round(time.Second), time.Duration(x.Wall).Round(time.Second))
	for _, f := range x.Until {
		if f.Point == "" {
			fmt.Fprintf(out, "-until %q: no point failed as it says\n", f.Until)
		} else {
			fmt.Fprintf(out, "-until %q: found at point %d, %s, %s after the command began\n", f.Until, f.Tried, f.Point,
				time.Duration(f.Elapsed).Round(time.Second))
		}
	}
	if repeat > 1 {
		var differ []string
		for _, r := range x.Rows {
			if !r.Agree {
				differ = append(differ, r.Point+" ("+strings.Join(r.Verdicts, ", ")+")")
			}
		}
		if len(differ) == 0 {
			fmt.Fprintf(out, "determinism: every point had the same verdict in its %d runs\n", repeat)
		} else {
			fmt.Fprintf(out, "determinism: %s of %d had verdicts that differ between their %d runs: %s\n",
				textout.Count(len(differ), "point", "points"), len(x.Rows), repeat, strings.Join(differ, "; "))
		}
	}
	var suite []string
	for _, r := range x.Rows {
		if r.Suite != "" {
			suite = append(suite, r.Point)
		}
	}
	if len(suite) > 0 {
		fmt.Fprintf(out, "a suite node failed beside the spec in %s (the suite's failure, not the spec's verdict; see each run's suite.json): %s\n",
			textout.Count(len(suite), "point's run", "points' runs"), strings.Join(suite, ", "))
	}
	for _, r := range x.Rows {
		switch {
		case r.Verdict == Fail || !r.Agree:
			fmt.Fprintf(out, "\nFAIL %s on %q\n  %s\n", r.Point, r.Spec, r.Failure)
			if !r.Agree {
				fmt.Fprintf(out, "  runs:     %s\n", runDirs(r))
			}
			if r.Difference != r.Failure {
				fmt.Fprintf(out, "  first difference: %s\n", r.Difference)
			}
			if r.Differential != "" && r.Differential != r.Difference {
				fmt.Fprintf(out, "  differential (after the spec failed, its end state unsettled): %s\n", r.Differential)
			}
			if r.Timeline != "" {
				fmt.Fprintf(out, "  timeline: %s\n", r.Timeline)
			} else {
				fmt.Fprintf(out, "  timeline: none written (see %s)\n", r.Dir)
			}
			fmt.Fprintf(out, "  rerun:    %s\n", r.Command)
		case r.Verdict == NotReached && r.Failure != "":
			fmt.Fprintf(out, "\nNOT REACHED but failed: %s on %q (the spec failed without the point firing)\n  %s\n  rerun: %s\n", r.Point, r.Spec, r.Failure, r.Command)
		case r.Verdict == Error:
			fmt.Fprintf(out, "\nERROR %s on %q: %s\n  runs: %s\n", r.Point, r.Spec, r.Failure, runDirs(r))
		}
	}
	fmt.Fprintln(out)
}

// runDirs names the directories of a row's runs, each once, in the runs' order; Dir alone for a row that
// has no Dirs (an explore.json written before they were kept).
func runDirs(r Row) string {
	var dirs []string
	for _, d := range r.Dirs {
		if d != "" && !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	if len(dirs) == 0 {
		return r.Dir
	}
	return strings.Join(dirs, ", ")
}

func joinModes(ms []perturb.Mode) string {
	var s []string
	for _, m := range ms {
		s = append(s, string(m))
	}
	return strings.Join(s, ",")
}

// pointDir is the directory name of the i-th point's runs: its number and the point in file-name characters.
func pointDir(i int, sp SpecPoint) string {
	return fmt.Sprintf("%03d-%s", i+1, strings.Trim(unsafeName.ReplaceAllString(sp.Point.String(), "-"), "-"))
}

// processDir is the directory name of the test process whose first run is it: its point's pointDir, with
// "-repeat<k>" for -repeat's k-th run of the point (from 2) and "-retry" for the process that runs again the
// runs of one whose suite set-up failed. No two processes of a command share a first run, so each writes
// its records, report and log apart: a later repeat of a point, in a process of its own, keeps the earlier
// one's.
func processDir(it item) string {
	name := pointDir(it.row, it.sp)
	if it.k > 0 {
		name += fmt.Sprintf("-repeat%d", it.k+1)
	}
	if it.retried {
		name += "-retry"
	}
	return name
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// ofSpecs keeps the records of the specs that ran and names the namespaces of the others (a case a suite
// node made, whose Spec is empty or no It's).
func ofSpecs(records []perturb.Record, specs []string) (kept []perturb.Record, left []string) {
	for _, r := range records {
		if slices.Contains(specs, r.Spec) {
			kept = append(kept, r)
		} else {
			left = append(left, r.Namespace)
		}
	}
	return kept, left
}

// hasSpec says a record of spec is among records.
func hasSpec(records []perturb.Record, spec string) bool {
	for _, r := range records {
		if r.Spec == spec {
			return true
		}
	}
	return false
}

// parallel calls f(0..n-1), jobs at a time, and returns when all have returned.
func parallel(jobs, n int, f func(i int)) {
	i := 0
	var mu sync.Mutex
	workers(jobs, func() (struct{}, int, bool) {
		mu.Lock()
		defer mu.Unlock()
		if i >= n {
			return struct{}{}, 0, false
		}
		i++
		return struct{}{}, i - 1, true
	}, func(_ struct{}, i int) { f(i) })
}

// workers runs do on what next hands out, jobs at a time, until next says there is no more.
func workers[T any](jobs int, next func() (T, int, bool), do func(T, int)) {
	var wg sync.WaitGroup
	for w := 0; w < max(jobs, 1); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				v, i, ok := next()
				if !ok {
					return
				}
				do(v, i)
			}
		}()
	}
	wg.Wait()
}

// runner compiles and runs the suite's test binary.
type runner struct {
	// suite is the suite's package directory; dir holds the runs; bin is the test binary, in binDir (a
	// temporary directory of its own, removed at the end; empty for a binary the caller gave).
	suite, dir, bin, binDir string
	// temp says dir is a temporary directory (no -report-dir), removed unless the runs found something.
	temp    bool
	timeout time.Duration
}

func newRunner(c config) (*runner, error) {
	r := &runner{bin: c.bin, timeout: c.timeout}
	var err error
	if r.suite, err = filepath.Abs(c.suite); err != nil {
		return nil, err
	}
	if tests, _ := filepath.Glob(filepath.Join(r.suite, "*_test.go")); len(tests) == 0 && c.bin == "" {
		return nil, fmt.Errorf("-suite (make's SUITE) %s has no _test.go file: name a Ginkgo suite's package directory, e.g. ./scenarios/ or ./examples/kuberay", c.suite)
	}
	if c.reportDir != "" {
		r.dir = c.reportDir
		err = os.MkdirAll(r.dir, 0o755)
	} else {
		r.dir, err = os.MkdirTemp("", "ensemble-explore-")
		r.temp = true
	}
	if err != nil {
		return nil, err
	}
	if r.dir, err = filepath.Abs(r.dir); err != nil {
		return nil, err
	}
	if r.bin == "" {
		// The binary goes to a directory of its own, never among the reports.
		if r.binDir, err = os.MkdirTemp("", "ensemble-explore-bin-"); err != nil {
			return nil, err
		}
		r.bin = filepath.Join(r.binDir, "suite.test")
	}
	return r, nil
}

func (r *runner) close() {
	if r.binDir != "" {
		_ = os.RemoveAll(r.binDir)
	}
}

// remove removes the temporary runs directory and says so, and why.
func (r *runner) remove(out io.Writer, why string) {
	_ = os.RemoveAll(r.dir)
	fmt.Fprintf(out, "%s: removed the runs' directory %s (REPORT_DIR=dir keeps the runs)\n", why, r.dir)
}

// compile builds the suite's test binary in the suite's directory, so its own go.mod (if any) applies.
func (r *runner) compile(ctx context.Context) error {
	cmd := exec.Command("go", "test", "-c", "-o", r.bin, ".")
	cmd.Dir = r.suite
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := proc.Run(ctx, cmd); err != nil {
		return fmt.Errorf("%s does not compile: %v\n%s", r.suite, err, out.String())
	}
	return nil
}

// runResult is one run of the binary.
type runResult struct {
	// dir is the run's directory; records the directory of its cases' records.
	dir, records string
	ginkgoreport.Run
	// reportErr says why the run has no report.
	reportErr error
}

// run runs the specs focus selects with ENSEMBLE_PERTURB=points and ENSEMBLE_BASELINE=baseline, into
// dir: records/ (ENSEMBLE_EXPLORE), artifacts/ (ENSEMBLE_ARTIFACTS), suite.json and output.log.
func (r *runner) run(ctx context.Context, dir, focus, points, baseline string) runResult {
	res := runResult{dir: dir, records: filepath.Join(dir, "records")}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		res.reportErr = err
		return res
	}
	report, logPath := filepath.Join(dir, "suite.json"), filepath.Join(dir, "output.log")
	log, err := os.Create(logPath)
	if err != nil {
		res.reportErr = err
		return res
	}
	defer log.Close()
	args := []string{"-test.v", "-ginkgo.v", "-ginkgo.no-color", "-ginkgo.focus=" + focus, "-ginkgo.fail-on-empty"}
	env := []string{"ENSEMBLE_EXPLORE=" + res.records, "ENSEMBLE_ARTIFACTS=" + filepath.Join(dir, "artifacts"),
		"ENSEMBLE_PERTURB=" + points, "ENSEMBLE_BASELINE=" + baseline}
	res.Run, err = ginkgoreport.RunSuite(ctx, r.bin, r.suite, args, env, r.timeout, report, log)
	if err != nil {
		res.reportErr = fmt.Errorf("%w: its output is %s", err, logPath)
	}
	return res
}

// setupFailure is the first line of the failure of a suite node that ran before spec (a BeforeSuite)
// when spec itself never began; "" otherwise.
func (res runResult) setupFailure(spec string) string {
	if sr, ok := ginkgoreport.It(res.Reports, spec); ok && !sr.State.Is(types.SpecStateSkipped) {
		return ""
	}
	for _, rep := range res.Reports {
		for _, sr := range rep.SpecReports {
			if sr.LeafNodeType.Is(types.NodeTypeBeforeSuite|types.NodeTypeSynchronizedBeforeSuite) && sr.Failed() {
				return sr.LeafNodeType.String() + ": " + firstLine(sr.Failure.Message)
			}
		}
	}
	return ""
}

// ran counts the It specs that ran.
func (res runResult) ran() int {
	return len(res.specs())
}

// specs are the full texts of the It specs that ran, in the report's order.
func (res runResult) specs() []string {
	var out []string
	for _, rep := range res.Reports {
		for _, sr := range rep.SpecReports {
			if sr.LeafNodeType == types.NodeTypeIt && !sr.State.Is(types.SpecStateSkipped|types.SpecStatePending) {
				out = append(out, ginkgoreport.Name(sr))
			}
		}
	}
	return out
}

// description is the suite's description (RunSpecs' text), which Ginkgo's focus matches before a spec's.
func (res runResult) description() string {
	for _, rep := range res.Reports {
		return rep.SuiteDescription
	}
	return ""
}

// baselineError says why an unperturbed run cannot serve as a baseline: no report, no spec, a failure.
func (res runResult) baselineError(name, focus, suite string) error {
	if res.reportErr != nil {
		return fmt.Errorf("%s: %w", name, res.reportErr)
	}
	if res.ran() == 0 {
		for _, rep := range res.Reports {
			for _, sr := range rep.SpecReports {
				if sr.LeafNodeType != types.NodeTypeIt && sr.Failed() {
					return fmt.Errorf("%s: the suite's %s failed, so no spec ran: %s (its output: %s)", name, sr.LeafNodeType,
						firstLine(sr.Failure.Message), filepath.Join(res.dir, "output.log"))
				}
			}
		}
		return fmt.Errorf("FOCUS=%q selects no spec of %s: check it against the specs' full texts (%s)", focus, suite, filepath.Join(res.dir, "output.log"))
	}
	var bad []string
	for _, rep := range res.Reports {
		for _, sr := range rep.SpecReports {
			if sr.Failed() {
				bad = append(bad, fmt.Sprintf("  %s %s: %s", strings.ToUpper(sr.State.String()), ginkgoreport.Name(sr), firstLine(sr.Failure.Message)))
			}
		}
		for _, reason := range rep.SpecialSuiteFailureReasons {
			bad = append(bad, "  suite: "+reason)
		}
	}
	if len(bad) == 0 && res.Code == 0 {
		return nil
	}
	if len(bad) == 0 {
		bad = append(bad, fmt.Sprintf("  the binary exited %d", res.Code))
	}
	return fmt.Errorf("%s, unperturbed, failed, and a spec that fails unperturbed cannot be judged (its output: %s):\n%s",
		name, filepath.Join(res.dir, "output.log"), strings.Join(bad, "\n"))
}

// judgeRun is the outcome of the run that records (one run's, of a spec) belong to, with the process's
// report; its timeline is found under artifacts/ when the log names none.
func (res runResult) judgeRun(spec string, records []perturb.Record) Outcome {
	o := judge(spec, records, res.Reports, res.reportErr)
	if o.Timeline == "" && o.Failure != "" && o.Verdict != Error {
		// The harness writes a case's artifacts to a directory named after its spec and ending in its
		// namespace.
		for _, r := range records {
			if r.Spec != spec || o.Timeline != "" {
				continue
			}
			if m, _ := filepath.Glob(filepath.Join(res.dir, "artifacts", "*-"+r.Namespace, "timeline.html")); len(m) > 0 {
				o.Timeline = m[0]
			}
		}
	}
	return o
}

// parseShard reads -shard: "" (the whole run, part 1 of 1) or i/n with 1 <= i <= n. Errors: anything else.
func parseShard(s string) (i, n int, err error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 1, 1, nil
	}
	a, b, ok := strings.Cut(s, "/")
	i, e1 := strconv.Atoi(a)
	n, e2 := strconv.Atoi(b)
	if !ok || e1 != nil || e2 != nil || n < 1 || i < 1 || i > n {
		return 0, 0, fmt.Errorf("-shard (make's SHARD) %q is not i/n with 1 <= i <= n, such as 1/4", s)
	}
	return i, n, nil
}

// shardOf keeps part i of n of todo (1 of 1: all of it): every n-th point from the i-th (1-based), each
// with its Index in todo.
func shardOf(todo []SpecPoint, i, n int) []SpecPoint {
	var out []SpecPoint
	for j, sp := range todo {
		if j%n == i-1 {
			sp.Index = j
			out = append(out, sp)
		}
	}
	return out
}

// mergeShards joins the explore.json files of every shard of one run (paths) into one Exploration, prints
// its table and report, and writes it to reportDir/explore.json. Errors: no reportDir, a file that cannot be
// read or is not an explore.json, files that are not each shard of one run exactly once (another suite,
// focus, modes, budget or enumeration, a shard missing or given twice), two rows at one place.
func mergeShards(paths []string, reportDir string, out io.Writer) (Exploration, error) {
	var x Exploration
	if reportDir == "" {
		return x, errors.New("-merge needs -report-dir (make's REPORT_DIR): the directory the joined explore.json goes to")
	}
	seen := map[int]string{}
	n := 0
	for _, path := range paths {
		var part Exploration
		b, err := os.ReadFile(path)
		if err == nil {
			err = json.Unmarshal(b, &part)
		}
		if err != nil {
			return x, fmt.Errorf("-merge: %s is not an explore.json: %v", path, err)
		}
		i, of, err := parseShard(part.Shard)
		if err != nil || part.Shard == "" {
			return x, fmt.Errorf("-merge: %s is not a shard's (it ran with no -shard)", path)
		}
		switch {
		case n == 0:
			n = of
			x = Exploration{Suite: part.Suite, Focus: part.Focus, Modes: part.Modes, Budget: part.Budget, Existed: part.Existed,
				Enumerated: part.Enumerated, Pruned: part.Pruned}
		case of != n:
			return x, fmt.Errorf("-merge: %s is shard %s, of %d shards, not %d", path, part.Shard, of, n)
		case part.Suite != x.Suite || part.Focus != x.Focus || part.Budget != x.Budget || part.Existed != x.Existed ||
			!slices.Equal(part.Modes, x.Modes):
			return x, fmt.Errorf("-merge: %s is a shard of another run (suite %s, focus %q, modes %v, budget %s, %d points) than %s",
				path, part.Suite, part.Focus, part.Modes, part.Budget, part.Existed, seen[firstKey(seen)])
		}
		if other, ok := seen[i]; ok {
			return x, fmt.Errorf("-merge: %s and %s are both shard %s", other, path, part.Shard)
		}
		seen[i] = path
		x.Baselines = append(x.Baselines, part.Baselines...)
		x.Rows = append(x.Rows, part.Rows...)
		x.Wall = max(x.Wall, part.Wall)
	}
	for i := 1; i <= n; i++ {
		if _, ok := seen[i]; !ok {
			return x, fmt.Errorf("-merge: shard %d/%d is missing: pass the explore.json of every shard", i, n)
		}
	}
	slices.SortStableFunc(x.Rows, func(a, b Row) int { return a.Index - b.Index })
	for k := 1; k < len(x.Rows); k++ {
		if x.Rows[k].Index == x.Rows[k-1].Index {
			return x, fmt.Errorf("-merge: two shards ran the point at place %d (%s and %s)", x.Rows[k].Index, x.Rows[k-1].Point, x.Rows[k].Point)
		}
	}
	x.Ran = len(x.Rows)
	fmt.Fprintf(out, "%s of %s joined\n", textout.Count(n, "shard", "shards"), x.Suite)
	if err := table(out, x.Rows); err != nil {
		return x, err
	}
	var took []time.Duration
	repeat := 1
	for _, r := range x.Rows {
		for _, d := range r.Took {
			took = append(took, time.Duration(d))
		}
		repeat = max(repeat, len(r.Verdicts))
	}
	report(out, x, took, time.Duration(x.Wall), repeat)
	if err := os.MkdirAll(reportDir, 0o755); err != nil {
		return x, err
	}
	js, err := textout.JSON(x)
	if err != nil {
		return x, err
	}
	path := filepath.Join(reportDir, "explore.json")
	if err := os.WriteFile(path, js, 0o644); err != nil {
		return x, err
	}
	fmt.Fprintf(out, "every row as JSON: %s\n", path)
	return x, nil
}

// firstKey is the smallest key of m, for naming the first shard read.
func firstKey(m map[int]string) int {
	k := -1
	for i := range m {
		if k < 0 || i < k {
			k = i
		}
	}
	return k
}

// pruneNote says why nothing was pruned when pruning was off or the records hold no reads; "" otherwise.
func pruneNote(on bool, records, second []perturb.Record) string {
	if !on {
		return " (-prune=false)"
	}
	for _, recs := range [][]perturb.Record{records, second} {
		for _, r := range recs {
			if !r.ReadsRecorded {
				return " (the unperturbed runs' records hold no reads: written by an older harness)"
			}
		}
	}
	return ""
}
