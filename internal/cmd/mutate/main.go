// Command mutate measures the scenario suite's mutation score over a reference operator package: how many
// of gremlins' standard mutants of the package's code (conditionals boundary and negation, arithmetic,
// increment/decrement, inverted negatives) make the suite fail.
//
// Usage (from the module root, with KUBEBUILDER_ASSETS set; `make mutate` does both):
//
//	go run ./internal/cmd/mutate [-pkg operators/multigres] [-base REV] [-max N] [-j 1] [-labels multigres] [-list]
//
// gremlins (github.com/go-gremlins/gremlins) finds the mutants, in a dry run over -pkg; it cannot run
// them against the scenario suite itself: it runs the mutated package's own tests, or with --integration
// every test of the module, and has no way to pass Ginkgo a label filter. So this command runs them:
//
//  1. The suite once with -coverpkg=./PKG/...: the baseline (it must pass) and the coverage; a mutant on
//     a line no spec runs is "not covered" without a run.
//  2. With -base REV, only mutants on lines `git diff -U0 REV` added or changed (uncommitted ones included).
//  3. Each covered mutant (-max N: an evenly spaced sample of N): the token replaced in a copy of its file
//     under a temporary directory, and `go test -overlay` of the suite's specs with -labels, so no file of
//     the checkout is ever written. A failing suite kills the mutant, a passing one lets it survive, a
//     package that no longer builds makes it not viable, a run past -timeout times out (counted as killed).
//
// Mutants in generated files (a "Code generated ... DO NOT EDIT." header) are left out. A survivor is a
// question about the suite: what behaviour of the operator changed without any spec noticing.
package main

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
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

type config struct {
	pkg, base, labels, suite, gremlins string
	max, jobs                          int
	list                               bool
	timeout                            time.Duration
}

func main() {
	var c config
	flag.StringVar(&c.pkg, "pkg", "operators/multigres", "package directory to mutate, relative to the module root (its subpackages too)")
	flag.StringVar(&c.base, "base", "", "only mutants on lines changed since this git revision")
	flag.IntVar(&c.max, "max", 0, "run at most this many covered mutants, evenly spaced (0: all)")
	flag.IntVar(&c.jobs, "j", 1, "mutants run at once")
	flag.StringVar(&c.labels, "labels", "", "Ginkgo label filter of the specs to run (default: the base name of -pkg)")
	flag.StringVar(&c.suite, "suite", "./scenarios/", "the test package that judges the mutants")
	flag.StringVar(&c.gremlins, "gremlins", "bin/gremlins", "the gremlins v0.6.0 binary")
	flag.BoolVar(&c.list, "list", false, "print the mutants -pkg and -base select, and stop before any suite run")
	flag.DurationVar(&c.timeout, "timeout", 0, "per-mutant limit on the suite's run (0: 3 times the baseline run, at least 2m)")
	flag.Parse()
	c.pkg = strings.TrimSuffix(filepath.ToSlash(filepath.Clean(c.pkg)), "/")
	if c.labels == "" {
		c.labels = filepath.Base(c.pkg)
	}
	if err := run(c); err != nil {
		fmt.Fprintf(os.Stderr, "mutate: %v\n", err)
		os.Exit(1)
	}
}

func run(c config) error {
	start := time.Now()
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		return errors.New("KUBEBUILDER_ASSETS is not set: run `make mutate`, or set it to $(tools/envtest/build.sh --dir)")
	}
	module, err := modulePath()
	if err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "ensemble-mutate-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	ms, err := discover(c, work)
	if err != nil {
		return err
	}
	h := Header{Pkg: c.pkg, Suite: c.suite, Labels: c.labels, Base: c.base}
	ms, h.Generated = dropGenerated(ms)
	if c.base != "" {
		before := len(ms)
		if ms, err = keepChanged(c, ms); err != nil {
			return err
		}
		h.OutsideBase = before - len(ms)
	}
	fmt.Printf("gremlins found %d mutants in %s (%d in generated files left out", len(ms)+h.Generated+h.OutsideBase, c.pkg, h.Generated)
	if c.base != "" {
		fmt.Printf(", %d on lines unchanged since %s", h.OutsideBase, c.base)
	}
	fmt.Println(")")
	if c.list {
		for _, m := range ms {
			fmt.Printf("  %s %s\n", m.Pos(), m.Kind)
		}
		return nil
	}
	if len(ms) == 0 {
		h.Wall = time.Since(start)
		report(os.Stdout, h, ms)
		return nil
	}

	fmt.Printf("baseline: %s with -coverpkg=./%s/... and label filter %q\n", c.suite, c.pkg, c.labels)
	cov, took, err := baseline(c, module, work)
	if err != nil {
		return err
	}
	if c.timeout == 0 {
		c.timeout = max(3*took, 2*time.Minute)
	}
	fmt.Printf("baseline passed in %s; per-mutant timeout %s\n", took.Round(100*time.Millisecond), c.timeout)

	var covered []int
	for i := range ms {
		if cov.Covers(ms[i].File, ms[i].Line, ms[i].Col) {
			ms[i].Status = NotRun
			covered = append(covered, i)
		} else {
			ms[i].Status = NotCovered
		}
	}
	var todo []int
	for _, k := range pick(len(covered), c.max) {
		todo = append(todo, covered[k])
	}
	fmt.Printf("%d mutants covered, %d not covered; running %d, %d at a time\n", len(covered), len(ms)-len(covered), len(todo), c.jobs)
	if err := runAll(c, work, ms, todo); err != nil {
		return err
	}
	h.Wall = time.Since(start)
	report(os.Stdout, h, ms)
	return nil
}

// modulePath is the module path in go.mod (the command runs from the module root).
func modulePath() (string, error) {
	data, err := os.ReadFile("go.mod")
	if err != nil {
		return "", fmt.Errorf("run from the module root: %w", err)
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
func discover(c config, work string) ([]Mutant, error) {
	out := filepath.Join(work, "gremlins.json")
	cmd := exec.Command(c.gremlins, "unleash", "--dry-run", "--silent", "--output", out, c.pkg)
	cmd.Env = append(os.Environ(), "GOFLAGS="+strings.TrimSpace(os.Getenv("GOFLAGS")+" -short -run=^$"))
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("gremlins dry run: %v\n%s", err, b)
	}
	f, err := os.Open(out)
	if err != nil {
		return nil, fmt.Errorf("gremlins wrote no report: %w", err)
	}
	defer f.Close()
	return parseGremlins(f, c.pkg)
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

// suiteArgs are the go test arguments of one run of the suite's selected specs.
func suiteArgs(c config, timeout time.Duration, extra ...string) []string {
	args := append([]string{"test", "-count=1", "-timeout", timeout.String()}, extra...)
	return append(args, c.suite, "-args", "-ginkgo.label-filter="+c.labels, "-ginkgo.fail-on-empty",
		"-ginkgo.fail-fast", "-ginkgo.no-color")
}

// baseline runs the unmutated suite with coverage of c.pkg; it must pass.
func baseline(c config, module, work string) (Coverage, time.Duration, error) {
	profile := filepath.Join(work, "cover.out")
	args := suiteArgs(c, 20*time.Minute, "-coverpkg=./"+c.pkg+"/...", "-coverprofile="+profile)
	res := goTest(args, filepath.Join(work, "artifacts-baseline"), 25*time.Minute)
	if res.err != nil {
		return nil, 0, res.err
	}
	if res.code != 0 {
		return nil, 0, fmt.Errorf("the suite fails without any mutant, so no mutant can be judged:\n%s", tail(res.out, 40))
	}
	f, err := os.Open(profile)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	cov, err := parseCoverage(f, module)
	return cov, res.took, err
}

// runAll runs the mutants ms[todo...], c.jobs at a time, printing a line as each ends.
func runAll(c config, work string, ms []Mutant, todo []int) error {
	var (
		mu    sync.Mutex
		done  int
		first error
		wg    sync.WaitGroup
	)
	next := make(chan int)
	for w := 0; w < max(c.jobs, 1); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				m, err := runMutant(c, work, i, ms[i])
				mu.Lock()
				if err != nil && first == nil {
					first = err
				}
				ms[i] = m
				done++
				fmt.Println(progress(done, len(todo), m))
				mu.Unlock()
			}
		}()
	}
	for _, i := range todo {
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

// runMutant writes the mutated file under work and runs the suite with it overlaid on the original.
func runMutant(c config, work string, id int, m Mutant) (Mutant, error) {
	src, err := os.ReadFile(m.File)
	if err != nil {
		return m, err
	}
	mutated, m, err := apply(src, m)
	if err != nil {
		return m, err
	}
	dir := filepath.Join(work, fmt.Sprintf("m%d", id))
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
	// go test's own -timeout ends the test binary (and the envtest it started); the deadline a minute
	// later ends the whole process group should that fail.
	res := goTest(suiteArgs(c, c.timeout, "-overlay="+ov), filepath.Join(dir, "artifacts"), c.timeout+time.Minute)
	if res.err != nil {
		return m, res.err
	}
	m.Status, m.Detail = classify(m.File, file, res.code, res.deadline, res.out)
	m.Took = res.took
	return m, nil
}

type result struct {
	code     int
	deadline bool
	out      string
	took     time.Duration
	err      error // the go command could not be run at all
}

// goTest runs the go command in its own process group, killed as a whole at the deadline.
func goTest(args []string, artifacts string, limit time.Duration) result {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Env = append(os.Environ(), "ENSEMBLE_ARTIFACTS="+artifacts)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	res := result{out: out.String(), took: time.Since(start), deadline: ctx.Err() != nil}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		res.code = exit.ExitCode()
	case res.deadline:
		res.code = -1
	default:
		res.err = fmt.Errorf("go test: %w", err)
	}
	return res
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
