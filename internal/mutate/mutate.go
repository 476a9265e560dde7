// Package mutate is `ensemble mutate`: a scenario suite's mutation score over a package of its module: how
// many of gremlins' standard mutants of the package's code (conditionals boundary and negation, arithmetic,
// increment/decrement, inverted negatives) make the suite fail.
//
// Usage (from the root of any Go module whose suite boots ensemble; `make mutate` runs this repository's):
//
//	ensemble mutate -pkg DIR [-suite DIR] [-base REV] [-max N] [-j N] [-labels FILTER] [-gremlins PATH] [-list]
//
// gremlins (github.com/go-gremlins/gremlins, GremlinsVersion: -gremlins names a binary, else it is installed
// once with go install into the user's cache directory) finds the mutants, in a dry run over -pkg; it cannot
// run them against the scenario suite itself: it runs the mutated package's own tests, or with --integration
// every test of the module, and has no way to pass Ginkgo a label filter. So this command runs them, and
// like PIT and Stryker it runs for each mutant only the specs that execute its position:
//
//  1. Per-spec coverage: the suite compiled once with -coverpkg=./PKG/..., a Ginkgo dry run lists the specs
//     -labels selects, and each runs alone (focused on its anchored full text, in its own test binary and
//     envtest, -j at a time) with a coverage profile of its own. Every spec must pass alone: together they
//     are the baseline. A mutant on a position no spec runs is "not covered" without a run.
//  2. With -base REV, only mutants on lines `git diff -U0 REV` added or changed (uncommitted ones included).
//  3. The mutant schema: the packages under -pkg are loaded with their types (go/packages), and each covered
//     mutant (-max N: an evenly spaced sample of N) is type-checked with its token replaced: one the
//     compiler would refuse is not viable, without a build. Every other mutant's position is rewritten,
//     in one copy of its file under a temporary directory, into a switch of package suite/mutant that
//     applies the original operator or a mutant's by the mutant active at run time (a generic call such as
//     mutant.Ordered(a, b, mutant.LSS, mutant.Alt{ID: 7, Op: mutant.LEQ}), whose arguments Go evaluates
//     once and in order as it evaluates the operands; a closure for a comparison whose operands' type Go
//     cannot infer; an if/else for an increment, an assignment or a branch). Mutants of one position
//     share its switch. The suite is compiled once with the rewritten files overlaid (go test -c
//     -overlay, so no file of the checkout is ever written).
//  4. The runs: a test process of the schema runs up to 10 mutants, those with the same covering specs
//     left together first, and the union of their specs, each spec once per mutant it covers, a run each
//     (the runs of a mutant a spec does not cover fail at once: mutant.SkipEnv, mutant.ErrDone):
//     ENSEMBLE_MUTANTS names the mutant of each run, suite/mutant's init makes the first active, and the
//     harness the next between runs, after the previous run's manager instances stopped and before the
//     fresh ones start (mutant.Begin), so the control plane boots once for all of them. The runs are -ginkgo.flake-attempts (ENSEMBLE_MUTANTS_RETRY), and every run goes on to
//     the next: the harness fails a run that passed on purpose (mutant.ErrPassed) and a run whose mutant
//     failed earlier in the process at once (mutant.ErrDone); each run's first failure in the report says
//     how it ended. A mutant a run fails is killed; one that passed all its specs survived; one whose runs
//     were not all judged waits for another process with the specs it has left. A run past -timeout is
//     timed out (counted as killed) and its process ended: the process writes a line to stderr as each run
//     begins and ends (mutant.Marker), so the command knows which run of which spec hung or died, judges
//     the runs before it, and runs the ones after it again elsewhere. A run that could not begin because
//     the one before left something behind runs again; one whose managers did not stop fails; a process in
//     which a suite node failed (the AfterSuite) runs each of its mutants again alone; one whose
//     BeforeSuite failed before any run began runs its mutants again in another process, once, as make
//     explore does (a second such failure kills the first run's mutant). A mutant evaluated
//     while its package initialises (a package-level variable, an init func) runs alone in a process,
//     active from the start. -j processes run at once, at most one booting its control plane per two
//     cores: past its boot a process mostly waits on the control plane (a killed run waits out its spec's
//     timeout), so -j may exceed the cores.
//  5. A mutant the schema cannot hold (a constant expression, which a call would make a variable one; a
//     shift; a switch that does not type-check) is compiled alone with its token replaced and runs its
//     covering specs with -ginkgo.fail-fast, as every mutant once did; the output names each and why.
//
// Mutants in generated files (a "Code generated ... DO NOT EDIT." header) are left out. A survivor is a
// question about the suite: what behaviour of the operator changed without any spec noticing.
package mutate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
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
)

// Synopsis is the command's usage line.
const Synopsis = "ensemble mutate -pkg DIR [-suite DIR] [-base REV] [-max N] [-j N] [-labels FILTER] [-gremlins PATH] [-list]"

// About is what the command does, in one line (ensemble -h lists it).
const About = "the suite's mutation score over a package of the module, each mutant judged by the specs that cover it"

// about is -h's description, after the usage line.
const about = About + `.

Run it from the module's root: -pkg and -suite are relative to it. gremlins ` + GremlinsVersion + ` lists the
mutants; without -gremlins it is installed once (go install) under the user's cache directory. Each spec the
label filter selects first runs alone with -coverpkg (all must pass). Then every covered mutant's position
is rewritten into a switch of suite/mutant, the suite is compiled once with go test -c -overlay (no file of
the checkout is written), and each mutant runs only the specs that cover its position, a run of each: one
test process runs up to 10 mutants through their specs. A mutant the switches cannot hold is compiled
alone, as before. -j processes run at once (past its boot a process mostly waits, so -j may exceed the
cores). It prints killed, survived, not covered per file, the score and the survivors.`

// GremlinsVersion is the gremlins release whose dry run lists the mutants (mutations copies its token
// replacements); the one installed when -gremlins is not given.
const GremlinsVersion = "v0.6.0"

// gremlinsModule is the package go install builds gremlins from.
const gremlinsModule = "github.com/go-gremlins/gremlins/cmd/gremlins"

type config struct {
	pkg, base, labels, suite, gremlins string
	max, jobs                          int
	list                               bool
	timeout                            time.Duration
}

// defaultJobs is -j's default: twice the cores. Per-spec coverage runs at most one process a core; a
// process of the schema mostly waits on its control plane past its boot (a killed run waits out its
// spec's timeout), and at most one boots per two cores at once, so more processes than cores pay.
func defaultJobs() int { return 2 * runtime.NumCPU() }

// makeVars are the make variables that set the flags.
var makeVars = map[string]string{"pkg": "PKG", "base": "BASE", "max": "MAX", "j": "MUTATE_JOBS", "labels": "LABELS"}

// Main runs the command with args (the words after "mutate"), its output to stdout and its one-line errors
// to stderr, and returns the exit code: 0 when the score was made, 1 when it could not be (bad input, a
// suite that fails without any mutant, an interrupt: ctx done stops the runs and removes the work directory).
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fail := func(err error) int {
		fmt.Fprintf(stderr, "mutate: %v\n", err)
		return 1
	}
	var c config
	fs := flag.NewFlagSet("mutate", flag.ContinueOnError)
	fs.StringVar(&c.pkg, "pkg", "", "package directory to mutate, relative to the module root (its subpackages too); required")
	fs.StringVar(&c.base, "base", "", "only mutants on lines changed since this git revision")
	fs.IntVar(&c.max, "max", 0, "run at most this many covered mutants, evenly spaced (0: all)")
	fs.IntVar(&c.jobs, "j", defaultJobs(), "test processes run at once (per-spec coverage: at most one a core; the mutants' runs; default twice the cores)")
	fs.StringVar(&c.labels, "labels", "", "Ginkgo label filter of the specs that judge the mutants (default: the operator's name for a package under operators/, else every spec)")
	fs.StringVar(&c.suite, "suite", ".", "the test package that judges the mutants, relative to the module root")
	fs.StringVar(&c.gremlins, "gremlins", "", "the gremlins "+GremlinsVersion+" binary (default: installed once under the user's cache directory)")
	fs.BoolVar(&c.list, "list", false, "print the mutants -pkg and -base select, and stop before any suite run")
	fs.DurationVar(&c.timeout, "timeout", 0, "limit on one run of a spec under a mutant (0: 3 times the spec's run alone, at least 2m); for a mutant compiled alone, on its run of all its specs (0: 3 times their sum)")
	cmdline.Usage(fs, Synopsis, about)
	if code, ok := cmdline.Parsed(fs, args, makeVars, stderr, 1, func() error {
		if c.pkg != "" {
			c.pkg = strings.TrimSuffix(filepath.ToSlash(filepath.Clean(c.pkg)), "/")
		}
		if c.labels == "" {
			c.labels = defaultLabels(c.pkg)
		}
		return check(c)
	}); !ok {
		return code
	}
	if _, err := run(ctx, c, stdout); err != nil {
		if ctx.Err() != nil {
			err = errors.New("interrupted: the runs are stopped and the work directory is removed")
		}
		return fail(err)
	}
	return 0
}

// check reads the numbers of the command line and -pkg. Errors: a negative -max or -timeout, a -j below
// 1, a working directory that is no module root, a -pkg missing or no package directory of the module
// (naming some there are).
func check(c config) error {
	if c.max < 0 {
		return fmt.Errorf("%s is %d: pass how many covered mutants to run, 1 or more, or 0 for all", cmdline.Name("max", makeVars), c.max)
	}
	if c.jobs < 1 {
		return fmt.Errorf("%s is %d: pass how many specs or mutants run at once, 1 or more", cmdline.Name("j", makeVars), c.jobs)
	}
	if c.timeout < 0 {
		return fmt.Errorf("-timeout is %s: pass a per-mutant limit such as 10m, or 0 for 3 times its specs' runs alone", c.timeout)
	}
	if _, err := modulePath(); err != nil {
		return err
	}
	return checkPkg(c.pkg)
}

// checkPkg says -pkg names no directory of Go files under the module root, and which it could name: the
// first package directories under -pkg's nearest existing ancestor (else the module root), in walk order,
// nested modules left out.
func checkPkg(pkg string) error {
	if m, _ := filepath.Glob(filepath.Join(pkg, "*.go")); pkg != "" && len(m) > 0 && !strings.HasPrefix(pkg, "../") && !filepath.IsAbs(pkg) {
		return nil
	}
	// The packages under -pkg's nearest existing ancestor come first: a typo in its last element names its
	// siblings.
	from := "."
	for dir := filepath.Dir(filepath.Clean(pkg)); pkg != "" && dir != "." && dir != "/" && !strings.HasPrefix(dir, ".."); dir = filepath.Dir(dir) {
		if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
			from = dir
			break
		}
	}
	var some []string
	_ = filepath.WalkDir(from, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if n := d.Name(); path != from && (strings.HasPrefix(n, ".") || strings.HasPrefix(n, "_") || n == "testdata" || n == "vendor" || n == "bin") {
			return filepath.SkipDir
		}
		if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil && path != "." && path != from {
			return filepath.SkipDir // a nested module
		}
		if len(some) == maxNamed {
			return filepath.SkipAll
		}
		if m, _ := filepath.Glob(filepath.Join(path, "*.go")); len(m) > 0 {
			some = append(some, filepath.ToSlash(path))
		}
		return nil
	})
	if pkg == "" {
		return fmt.Errorf("pass %s DIR, the package directory to mutate relative to the module root, such as %s", cmdline.Name("pkg", makeVars), strings.Join(some, ", "))
	}
	return fmt.Errorf("%s %q is no package directory of the module (run from the module root): pass one of %s", cmdline.Name("pkg", makeVars), pkg, strings.Join(some, ", "))
}

// maxNamed is how many package directories checkPkg names.
const maxNamed = 12

// gremlins is the gremlins binary to run: c.gremlins when set, else GremlinsVersion under the user's cache
// directory, installed there with go install the first time (saying so on out). Errors: a -gremlins that is
// no file, no cache directory, or go install's, with its output.
func gremlins(ctx context.Context, c config, out io.Writer) (string, error) {
	if c.gremlins != "" {
		if fi, err := os.Stat(c.gremlins); err != nil || fi.IsDir() {
			return "", fmt.Errorf("-gremlins %s is no file: pass the gremlins %s binary, or leave -gremlins out to have it installed", c.gremlins, GremlinsVersion)
		}
		return filepath.Abs(c.gremlins)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no cache directory to install gremlins into (%v): pass -gremlins", err)
	}
	dir := filepath.Join(cache, "ensemble", "gremlins@"+GremlinsVersion)
	bin := filepath.Join(dir, "gremlins")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	fmt.Fprintf(out, "installing gremlins %s into %s (once)\n", GremlinsVersion, dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	// Outside any module and workspace, with the module's own go flags left out: go install pkg@version.
	res := command(ctx, buildLimit, dir, []string{"GOBIN=" + dir, "GOFLAGS=", "GOWORK=off"}, "go", "install", gremlinsModule+"@"+GremlinsVersion)
	if res.err == nil && res.code != 0 {
		res.err = fmt.Errorf("go install %s@%s failed (pass -gremlins to use a binary of your own):\n%s", gremlinsModule, GremlinsVersion, suitebin.Tail(res.out, 20))
	}
	return bin, res.err
}

// runner holds what the mutants' runs share: the suite's package directory (absolute, where go test runs
// its binary), the suite's description and each spec's time alone (the timeout's basis).
type runner struct {
	config
	// ctx ends every run when the command is interrupted; out is the command's output.
	ctx                    context.Context
	out                    io.Writer
	work, dir, description string
	alone                  map[string]time.Duration
	// boots holds a token for each test process booting its control plane (bootsAtOnce at most).
	boots chan struct{}
}

// bootsAtOnce is how many test processes of the schema boot their control plane at once: a boot keeps about
// two cores busy (etcd, kube-apiserver, kube-controller-manager and the managers starting), and four boots at
// once on two shared cores failed (kube-apiserver did not come up within its minute), while a process past
// its boot mostly waits on the control plane. So -j can run more processes than there are cores.
var bootsAtOnce = max(1, runtime.NumCPU()/2)

// run makes the score (or, with -list, lists the mutants), printing to out, and returns the mutants judged.
func run(ctx context.Context, c config, out io.Writer) ([]Mutant, error) {
	start := time.Now()
	module, err := modulePath()
	if err != nil {
		return nil, err
	}
	dir, err := suitebin.Dir(c.suite)
	if err != nil {
		return nil, err
	}
	if !c.list {
		if _, err := suitebin.Assets(); err != nil {
			return nil, err
		}
	}
	if c.gremlins, err = gremlins(ctx, c, out); err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp("", "ensemble-mutate-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	r := &runner{config: c, ctx: ctx, out: out, work: work, dir: dir, boots: make(chan struct{}, bootsAtOnce)}

	ms, err := discover(ctx, c, work)
	if err != nil {
		return nil, err
	}
	h := Header{Pkg: c.pkg, Suite: c.suite, Labels: c.labels, Base: c.base}
	ms, h.Generated = dropGenerated(ms)
	ms, h.OtherModules = dropOtherModules(ms)
	if c.base != "" {
		before := len(ms)
		if ms, err = keepChanged(c, ms); err != nil {
			return nil, err
		}
		h.OutsideBase = before - len(ms)
	}
	fmt.Fprintf(out, "gremlins found %d mutants in %s (%d in generated files left out", len(ms)+h.Generated+h.OtherModules+h.OutsideBase, c.pkg, h.Generated)
	if h.OtherModules > 0 {
		fmt.Fprintf(out, ", %d in nested modules, whose code the suite does not build", h.OtherModules)
	}
	if c.base != "" {
		fmt.Fprintf(out, ", %d on lines unchanged since %s", h.OutsideBase, c.base)
	}
	fmt.Fprintln(out, ")")
	if c.list {
		for _, m := range ms {
			fmt.Fprintf(out, "  %s %s\n", m.Pos(), m.Kind)
		}
		return ms, nil
	}
	if len(ms) == 0 {
		h.Wall = time.Since(start)
		report(out, h, ms)
		return ms, nil
	}

	began := time.Now()
	cov, err := r.coverage(module)
	if err != nil {
		return nil, err
	}
	h.Specs, h.Coverage = len(r.alone), time.Since(began)
	fmt.Fprintf(out, "per-spec coverage: %d specs passed alone in %s (each min/median/max %s)\n", h.Specs,
		h.Coverage.Round(time.Second), spread(slices.Collect(maps.Values(r.alone)), round))

	var covered []int
	for i := range ms {
		if ms[i].Specs = cov.Specs(ms[i].File, ms[i].Line, ms[i].Col); len(ms[i].Specs) > 0 {
			ms[i].Status = NotRun
			covered = append(covered, i)
		} else {
			ms[i].Status = NotCovered
		}
	}
	var todo, counts []int
	sum := 0
	for _, i := range covered {
		counts = append(counts, len(ms[i].Specs))
		sum += len(ms[i].Specs)
	}
	for _, k := range pick(len(covered), c.max) {
		todo = append(todo, covered[k])
	}
	fmt.Fprintf(out, "%d mutants covered, %d not covered; specs covering each, min/median/max %s: %d spec runs for all, of %d without selection\n",
		len(covered), len(ms)-len(covered), spread(counts, strconv.Itoa), sum, len(covered)*h.Specs)
	if err := r.judge(ms, todo, &h); err != nil {
		return nil, err
	}
	h.Wall = time.Since(start)
	report(out, h, ms)
	return ms, nil
}

// defaultLabels is the label filter of -pkg's specs: the operator's name for a package under operators/
// (operators/matrixone/hakeeper's specs are labelled matrixone, as this repository's suite labels its
// operators), else "", every spec of the suite: another module's labels are its own.
func defaultLabels(pkg string) string {
	if parts := strings.Split(pkg, "/"); len(parts) >= 2 && parts[0] == "operators" {
		return parts[1]
	}
	return ""
}

// modulePath is the module path in go.mod (the command runs from the module root).
func modulePath() (string, error) {
	data, err := os.ReadFile("go.mod")
	if err != nil {
		wd, _ := os.Getwd()
		return "", fmt.Errorf("run from the module root, where go.mod is (%s has none): -pkg and -suite are relative to it", wd)
	}
	for _, l := range strings.Split(string(data), "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == "module" {
			return f[1], nil
		}
	}
	return "", errors.New("go.mod names no module")
}

// discover asks gremlins for the mutants of c.pkg: a dry run, which lists every mutant with its kind and
// position. Its coverage step runs the package's own tests, whose coverage is not the suite's and is
// ignored; GOFLAGS makes that step run none (-run=^$, and -short keeps the package's TestMain from
// booting envtest).
func discover(ctx context.Context, c config, work string) ([]Mutant, error) {
	out := filepath.Join(work, "gremlins.json")
	cmd := exec.Command(c.gremlins, "unleash", "--dry-run", "--silent", "--output", out, c.pkg)
	// gremlins makes its own temporary directories: under the work directory, they go with it.
	cmd.Env = append(os.Environ(), "GOFLAGS="+strings.TrimSpace(os.Getenv("GOFLAGS")+" -short -run=^$"), "TMPDIR="+work)
	var b bytes.Buffer
	cmd.Stdout, cmd.Stderr = &b, &b
	if err := proc.Run(ctx, cmd); err != nil {
		return nil, fmt.Errorf("gremlins dry run: %v\n%s", err, b.String())
	}
	f, err := os.Open(out)
	if err != nil {
		return nil, fmt.Errorf("gremlins wrote no report: %w", err)
	}
	defer f.Close()
	return parseGremlins(f, c.pkg)
}

// dropOtherModules leaves out the mutants of files in a nested module (a directory under the module root
// with a go.mod of its own, such as an example at another version): gremlins walks into it, but the suite
// builds that module's code from elsewhere, if at all.
func dropOtherModules(ms []Mutant) ([]Mutant, int) {
	nested := map[string]bool{}
	var inNested func(dir string) bool
	inNested = func(dir string) bool {
		if dir == "." || dir == "/" || dir == "" {
			return false
		}
		if n, ok := nested[dir]; ok {
			return n
		}
		_, err := os.Stat(filepath.Join(dir, "go.mod"))
		n := err == nil || inNested(filepath.Dir(dir))
		nested[dir] = n
		return n
	}
	var out []Mutant
	for _, m := range ms {
		if !inNested(filepath.Dir(filepath.FromSlash(m.File))) {
			out = append(out, m)
		}
	}
	return out, len(ms) - len(out)
}

// dropGenerated leaves out the mutants of generated files (deepcopy and the like): a question about
// controller-gen, not the suite.
func dropGenerated(ms []Mutant) ([]Mutant, int) {
	generated := map[string]bool{}
	var out []Mutant
	for _, m := range ms {
		g, ok := generated[m.File]
		if !ok {
			f, err := parser.ParseFile(token.NewFileSet(), m.File, nil, parser.ParseComments|parser.PackageClauseOnly)
			g = err == nil && ast.IsGenerated(f)
			generated[m.File] = g
		}
		if !g {
			out = append(out, m)
		}
	}
	return out, len(ms) - len(out)
}

// keepChanged keeps the mutants on lines `git diff -U0 base` added or changed.
func keepChanged(c config, ms []Mutant) ([]Mutant, error) {
	cmd := exec.Command("git", "diff", "-U0", "--no-color", "--no-ext-diff", c.base, "--", c.pkg)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git diff %s: %v: %s", c.base, err, strings.TrimSpace(stderr.String()))
	}
	changed, err := parseDiff(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	var out []Mutant
	for _, m := range ms {
		if changed.Has(m.File, m.Line) {
			out = append(out, m)
		}
	}
	return out, nil
}

// buildLimit bounds one compile of the suite.
const buildLimit = 20 * time.Minute

// coverage compiles the suite with coverage of c.pkg, lists the specs the label filter selects (a dry run)
// and runs each alone, c.jobs at a time, with a profile of its own. It sets r.description and r.alone (each
// spec's run time). Errors: the suite does not compile, the filter selects no spec, a spec fails alone.
func (r *runner) coverage(module string) (Coverage, error) {
	dir := filepath.Join(r.work, "coverage")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	bin := filepath.Join(dir, "suite.test")
	coverpkg := "./" + path.Join(r.pkg, "...") // ./operators/multigres/..., or ./... for -pkg .
	fmt.Fprintf(r.out, "per-spec coverage: compiling %s with -coverpkg=%s\n", r.suite, coverpkg)
	res := command(r.ctx, buildLimit, "", nil, "go", "test", "-c", "-o", bin, "-coverpkg="+coverpkg, r.dir)
	if res.err != nil {
		return nil, res.err
	}
	if res.code != 0 {
		return nil, fmt.Errorf("the suite does not compile without any mutant:\n%s", suitebin.Tail(res.out, 40))
	}
	dry := filepath.Join(dir, "dry-run.json")
	res = command(r.ctx, buildLimit, r.dir, nil, bin, "-ginkgo.dry-run", "-ginkgo.no-color", "-ginkgo.label-filter="+r.labels,
		"-ginkgo.json-report="+dry)
	if res.err != nil {
		return nil, res.err
	}
	if res.code != 0 {
		return nil, fmt.Errorf("the suite's dry run with label filter %q fails (set -labels, make's LABELS):\n%s", r.labels, suitebin.Tail(res.out, 20))
	}
	reports, err := ginkgoreport.Read(dry)
	if err != nil {
		return nil, err
	}
	var specs []string
	r.description, specs = selected(reports)
	if len(specs) == 0 {
		return nil, fmt.Errorf("label filter %q selects no spec of %s: set -labels (make's LABELS)", r.labels, r.suite)
	}
	fmt.Fprintf(r.out, "per-spec coverage: %d specs (label filter %q), each alone, %d at a time\n", len(specs), r.labels, min(r.jobs, runtime.NumCPU()))

	r.alone = map[string]time.Duration{}
	cov := Coverage{}
	var mu sync.Mutex
	done := 0
	// Each run boots a control plane: at most one a core at once, whatever -j.
	err = each(min(r.jobs, runtime.NumCPU()), len(specs), func(i int) error {
		profile := filepath.Join(dir, fmt.Sprintf("spec%d.out", i))
		res := r.suiteRun(bin, filepath.Join(dir, fmt.Sprintf("artifacts%d", i)), 20*time.Minute, []string{specs[i]},
			"-test.coverprofile="+profile)
		if res.err != nil {
			return res.err
		}
		if res.code != 0 {
			return fmt.Errorf("spec %q fails alone without any mutant, so no mutant can be judged by it (exit %d, %s):\n%s",
				specs[i], res.code, res.took.Round(time.Second), suitebin.Tail(res.out, 40))
		}
		f, err := os.Open(profile)
		if err != nil {
			return fmt.Errorf("spec %q passed but wrote no coverage profile: %w", specs[i], err)
		}
		defer f.Close()
		mu.Lock()
		defer mu.Unlock()
		if err := cov.Read(f, module, specs[i]); err != nil {
			return err
		}
		r.alone[specs[i]] = res.took
		done++
		fmt.Fprintf(r.out, "  [%*d/%d] %s alone: %s\n", len(strconv.Itoa(len(specs))), done, len(specs), specs[i], round(res.took))
		return nil
	})
	return cov, err
}

// selected is the suite's description and the full texts of the specs a dry-run report marks as run (the
// label filter's), each once, in the report's order.
func selected(reports []types.Report) (string, []string) {
	description := ""
	for _, rep := range reports {
		description = rep.SuiteDescription
	}
	var out []string
	for _, sr := range ginkgoreport.Ran(reports) {
		if n := ginkgoreport.Name(sr); !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return description, out
}

// suiteRun runs the compiled suite bin on exactly specs (full texts), in the suite's package directory,
// with go test's -timeout limit, artifacts under artifacts and the extra test flags.
func (r *runner) suiteRun(bin, artifacts string, limit time.Duration, specs []string, extra ...string) result {
	args := append([]string{"-test.timeout=" + limit.String()}, extra...)
	args = append(args, "-ginkgo.label-filter="+r.labels, "-ginkgo.focus="+focus(r.description, specs),
		"-ginkgo.fail-on-empty", "-ginkgo.fail-fast", "-ginkgo.no-color")
	// -test.timeout ends the binary (and the envtest it started); the deadline a minute later ends the
	// whole process group should that fail.
	return command(r.ctx, limit+time.Minute, r.dir, []string{"ENSEMBLE_ARTIFACTS=" + artifacts}, bin, args...)
}

// mutant writes the mutated file under the work directory, compiles the suite with it overlaid on the
// original and runs the specs that cover the mutant's position.
func (r *runner) mutant(id int, m Mutant) (Mutant, error) {
	src, err := os.ReadFile(m.File)
	if err != nil {
		return m, err
	}
	mutated, m, err := apply(src, m)
	if err != nil {
		return m, err
	}
	dir := filepath.Join(r.work, fmt.Sprintf("m%d", id))
	defer os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return m, err
	}
	orig, err := filepath.Abs(m.File)
	if err != nil {
		return m, err
	}
	file := filepath.Join(dir, filepath.Base(m.File))
	if err := os.WriteFile(file, mutated, 0o644); err != nil {
		return m, err
	}
	overlay, _ := json.Marshal(map[string]map[string]string{"Replace": {orig: file}})
	ov := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(ov, overlay, 0o644); err != nil {
		return m, err
	}
	bin := filepath.Join(dir, "suite.test")
	res := command(r.ctx, buildLimit, "", nil, "go", "test", "-c", "-o", bin, "-overlay="+ov, r.dir)
	m.Compile = res.took
	if res.err != nil {
		return m, res.err
	}
	if res.code != 0 {
		m.Status, m.Detail = classifyBuild(m.File, file, res.out)
		return m, nil
	}
	limit := r.timeout
	if limit == 0 {
		var sum time.Duration
		for _, s := range m.Specs {
			sum += r.alone[s]
		}
		limit = max(3*sum, 2*time.Minute)
	}
	rep := filepath.Join(dir, "suite.json")
	res = r.suiteRun(bin, filepath.Join(dir, "artifacts"), limit, m.Specs, "-ginkgo.json-report="+rep)
	m.Run = res.took
	if res.err != nil {
		return m, res.err
	}
	m.Status, m.Detail = classifyRun(res.code, res.deadline, res.out)
	m.Ran = -1
	if reports, err := ginkgoreport.Read(rep); err == nil {
		m.Ran = len(ginkgoreport.Ran(reports))
	}
	return m, nil
}

// each calls f(0) ... f(n-1), jobs at a time, and hands out no further call after the first error, which
// it returns.
func each(jobs, n int, f func(int) error) error {
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	next := make(chan int)
	for w := 0; w < max(jobs, 1); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := range n {
		mu.Lock()
		stop := first != nil
		mu.Unlock()
		if stop {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	return first
}

type result struct {
	code     int
	deadline bool
	out      string
	took     time.Duration
	err      error // the command could not be run at all
}

// command runs name with args in dir ("" for the current directory) and env added, in its own process
// group, ended as a whole (proc.Run) at the limit (code -1 and deadline then) or when ctx is done (an
// error then: the command was interrupted).
func command(ctx context.Context, limit time.Duration, dir string, env []string, name string, args ...string) result {
	lctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := proc.Run(lctx, cmd)
	res := result{out: out.String(), took: time.Since(start), deadline: lctx.Err() != nil && ctx.Err() == nil}
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		res.err = fmt.Errorf("%s: interrupted", filepath.Base(name))
	case err == nil:
	case res.deadline:
		res.code = -1
	case errors.As(err, &exit):
		res.code = exit.ExitCode()
	default:
		res.err = fmt.Errorf("%s: %w", filepath.Base(name), err)
	}
	return res
}
