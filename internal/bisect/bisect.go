// Package bisect is `ensemble bisect`: it finds the first commit at which focused specs of a scenario suite
// fail, bisecting in a throw-away `git worktree` (in a temporary directory), so the caller's checkout (its
// HEAD, index and working tree, also its own bisect, if one is in progress) is never touched, also on an
// interrupt.
//
// Usage (inside any git checkout of a Go module whose suite boots ensemble; `make bisect` runs this
// repository's):
//
//	ensemble bisect -good REV [-bad HEAD] -focus REGEXP [-suite DIR] [-report-dir DIR] [-timeout 20m] [-ginkgo-flags FLAGS]
//
// Each step compiles the suite at the commit (go test -c in the suite's directory, the same path in the
// worktree as -suite is in the checkout; a commit that does not compile, or has no suite there, is skipped)
// and runs only the focused specs (-ginkgo.focus) with a Ginkgo JSON report; a commit at which the focus
// selects no spec is skipped too. -good and -bad are tested first: -bad must fail and -good pass, else there
// is nothing to bisect. The envtest binaries are found once, from the caller's environment, and used at
// every commit. The steps are git bisect's own (start, then good, bad or skip after each), driven from here.
//
// -test-cmd runs a shell command at each step instead of the suite (the self-test runs
// `go test -run "$FOCUS" ./...` in a tiny module); it sees FOCUS and BISECT_REPORT (a path where it may write
// a Ginkgo JSON report) and exits 0 for good, 125 for skip, anything else for bad. With it, -build-cmd is
// what must succeed for a commit to be tested (default `go build ./... && go test -count=1 -run '^$' ./...`).
//
// Exit 0 when the first bad commit is named, 1 when the ends are not a failing -bad and a passing -good or
// only skipped commits are left, 2 with one line on bad input, 130 on an interrupt (ctx done: the step
// under way stops, the worktree is removed).
package bisect

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/ensembletest/ensemble/internal/cmdline"
	"github.com/ensembletest/ensemble/internal/ginkgoreport"
	"github.com/ensembletest/ensemble/internal/proc"
	"github.com/ensembletest/ensemble/internal/suitebin"
	"github.com/ensembletest/ensemble/internal/textout"
)

// Synopsis is the command's usage line.
const Synopsis = "ensemble bisect -good REV [-bad HEAD] -focus REGEXP [-suite DIR] [-report-dir DIR] [-timeout 20m] [-ginkgo-flags FLAGS]"

// About is what the command does, in one line (ensemble -h lists it).
const About = "the first commit at which the focused specs fail: git bisect in a throw-away worktree, your checkout untouched"

// about is -h's description, after the usage line.
const about = About + `.

Run it inside the git checkout. -bad must fail and -good pass; each step compiles the suite at its commit
(one that does not compile, or has no spec the focus selects, is skipped) and runs only the focused specs.
It prints the first bad commit (hash, subject, files) and the specs' failure there; -report-dir keeps every
step's build log, test log, JSON report and failure dumps in DIR/bisect/<hash>/.`

// makeVars are the make variables that set the flags.
var makeVars = map[string]string{"good": "GOOD", "bad": "BAD", "focus": "FOCUS", "report-dir": "REPORT_DIR",
	"timeout": "SUITE_TIMEOUT", "ginkgo-flags": "GINKGO_FLAGS"}

// defaultBuildCmd is what must succeed, with -test-cmd, for a commit to be tested.
const defaultBuildCmd = `go build ./... && go test -count=1 -run '^$' ./...`

// config is the command line.
type config struct {
	good, bad, focus, suite, reportDir, ginkgoFlags, testCmd, buildCmd string
	timeout                                                            time.Duration
}

// errInterrupted ends the bisect when ctx is done.
var errInterrupted = errors.New("interrupted; the worktree is removed and your checkout is as it was")

// Main runs the command with args (the words after "bisect"), its output to stdout and its one-line errors
// to stderr, and returns the exit code. ctx ends the step under way (an interrupt).
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var c config
	fs := flag.NewFlagSet("bisect", flag.ContinueOnError)
	fs.StringVar(&c.good, "good", "", "a commit at which the focused specs pass (required)")
	fs.StringVar(&c.bad, "bad", "HEAD", "a later commit at which they fail")
	fs.StringVar(&c.focus, "focus", "", "Ginkgo focus regexp of the specs that fail at -bad and pass at -good (required)")
	fs.StringVar(&c.suite, "suite", ".", "the Ginkgo suite's package directory, in the checkout (the same path is used at every commit)")
	fs.StringVar(&c.reportDir, "report-dir", "", "keep every step's build log, test log, JSON report and failure dumps under DIR/bisect/<hash>/")
	fs.DurationVar(&c.timeout, "timeout", 20*time.Minute, "each step's -test.timeout")
	fs.StringVar(&c.ginkgoFlags, "ginkgo-flags", "", "more flags of the test binary, separated by spaces")
	fs.StringVar(&c.testCmd, "test-cmd", "", "a shell command to run at each step instead of the suite (sees FOCUS and BISECT_REPORT; exit 0 good, 125 skip, else bad)")
	fs.StringVar(&c.buildCmd, "build-cmd", defaultBuildCmd, "with -test-cmd, what must succeed for a commit to be tested")
	cmdline.Usage(fs, Synopsis, about)
	if code, ok := cmdline.Parsed(fs, args, makeVars, stderr, 2, func() error { return check(c) }); !ok {
		return code
	}
	code, err := run(ctx, c, stdout, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "bisect: %v\n", err)
	}
	return code
}

// check refuses a command line without -good or -focus, or with a non-positive -timeout.
func check(c config) error {
	switch {
	case c.good == "":
		return fmt.Errorf("pass %s <rev>, a commit at which the -focus specs pass (and -focus <spec regexp>), e.g. -good HEAD~20 -focus 'becomes Healthy'", cmdline.Name("good", makeVars))
	case c.focus == "":
		return fmt.Errorf("pass %s <spec regexp>, the spec(s) that fail at -bad %s and pass at -good %s, e.g. -focus 'becomes Healthy'", cmdline.Name("focus", makeVars), c.bad, c.good)
	case c.timeout <= 0:
		return fmt.Errorf("%s is %s: pass each step's limit, such as 20m", cmdline.Name("timeout", makeVars), c.timeout)
	}
	return nil
}

// bisector holds one bisect's state: the caller's checkout, the worktree and where the steps go.
type bisector struct {
	config
	ctx context.Context
	// repo is the caller's checkout; wt the worktree; steps holds a directory per tested commit; rel is the
	// suite's directory relative to the checkout's root; assets the envtest binaries' directory.
	repo, wt, steps, rel, assets string
	out, errOut                  io.Writer
}

// run bisects, printing to out (and the ends' verdicts that end it to errOut). It returns the exit code and,
// for 2 and 130, the one line Main prints.
func run(ctx context.Context, c config, out, errOut io.Writer) (int, error) {
	if _, err := exec.LookPath("git"); err != nil {
		return 2, errors.New("git is not installed")
	}
	b := &bisector{config: c, ctx: ctx, out: out, errOut: errOut}
	wd, _ := os.Getwd()
	top, err := git(wd, "rev-parse", "--show-toplevel")
	if err != nil {
		return 2, fmt.Errorf("run it inside a git checkout (%s is not one)", wd)
	}
	b.repo = top
	good, err := git(b.repo, "rev-parse", "-q", "--verify", c.good+"^{commit}")
	if err != nil {
		return 2, fmt.Errorf("%s %s is not a commit of %s", cmdline.Name("good", makeVars), c.good, b.repo)
	}
	bad, err := git(b.repo, "rev-parse", "-q", "--verify", c.bad+"^{commit}")
	if err != nil {
		return 2, fmt.Errorf("%s %s is not a commit of %s", cmdline.Name("bad", makeVars), c.bad, b.repo)
	}
	if good == bad {
		return 2, fmt.Errorf("-good %s and -bad %s are the same commit", c.good, c.bad)
	}
	if _, err := git(b.repo, "merge-base", "--is-ancestor", good, bad); err != nil {
		return 2, fmt.Errorf("-good %s (%s) is not an ancestor of -bad %s (%s): -good must be an older commit of -bad's history", c.good, good[:12], c.bad, bad[:12])
	}
	count, _ := git(b.repo, "rev-list", "--count", good+".."+bad)
	n, _ := strconv.Atoi(count)
	commits := textout.Count(n, "commit", "commits")
	each := c.testCmd
	if c.testCmd == "" {
		dir, err := suitebin.Dir(c.suite)
		if err != nil {
			return 2, err
		}
		if b.rel, err = filepath.Rel(b.repo, dir); err != nil || strings.HasPrefix(b.rel, "..") {
			return 2, fmt.Errorf("-suite %s is outside the checkout %s", c.suite, b.repo)
		}
		if b.assets, err = suitebin.Assets(); err != nil {
			return 2, err
		}
		each = fmt.Sprintf("go test -c ./%s && suite.test -ginkgo.focus='%s'", filepath.ToSlash(b.rel), c.focus)
		if c.ginkgoFlags != "" {
			each += " " + c.ginkgoFlags
		}
	}

	tmp, err := os.MkdirTemp("", "ensemble-bisect-")
	if err != nil {
		return 2, err
	}
	b.wt = filepath.Join(tmp, "worktree")
	b.steps = filepath.Join(tmp, "steps")
	if c.reportDir != "" {
		if b.steps, err = filepath.Abs(filepath.Join(c.reportDir, "bisect")); err == nil {
			err = os.MkdirAll(b.steps, 0o755)
		}
		if err != nil {
			_ = os.RemoveAll(tmp)
			return 2, err
		}
	}
	// The worktree (and its bisect state, which lives in the worktree's own git dir) and the temporary
	// directory go whatever happens; the step under way has ended by then (proc.Run).
	defer func() {
		if _, err := os.Stat(b.wt); err == nil {
			if _, err := git(b.repo, "worktree", "remove", "--force", "--force", b.wt); err != nil {
				_ = os.RemoveAll(b.wt)
			}
		}
		_, _ = git(b.repo, "worktree", "prune")
		_ = os.RemoveAll(tmp)
	}()
	if _, err := git(b.repo, "-c", "core.hooksPath=/dev/null", "worktree", "add", "-q", "--detach", b.wt, bad); err != nil {
		return 2, fmt.Errorf("git worktree add: %v", err)
	}

	fmt.Fprintf(out, "bisecting %s (-good %s) .. %s (-bad %s): %s, in a worktree at %s\n", good[:12], c.good, bad[:12], c.bad, commits, b.wt)
	fmt.Fprintf(out, "each step: %s\n", each)
	dirty := 0
	if st, err := git(b.repo, "--no-optional-locks", "status", "--porcelain", "--untracked-files=no"); err == nil && st != "" {
		dirty = len(strings.Split(st, "\n"))
	}
	if dirty > 0 {
		fmt.Fprintf(out, "note: your checkout has uncommitted changes to %d files; they are not bisected: only commits are, -bad %s is %s as committed (your files are left as they are)\n", dirty, c.bad, bad[:12])
	}

	fmt.Fprintln(out, "testing the ends first:")
	v, err := b.testAt(bad)
	if err != nil {
		return 130, err
	}
	switch v {
	case "good":
		if dirty > 0 {
			fmt.Fprintf(errOut, "bisect: -bad %s (%s) as committed passes -focus '%s', and your checkout has uncommitted changes to %d files, which bisect never tests: if they make the spec fail, commit them first (then -bad HEAD is that commit); else the spec may be flaky (ensemble flake -n 10 -focus '%s')\n", c.bad, bad[:12], c.focus, dirty, c.focus)
		} else {
			fmt.Fprintf(errOut, "bisect: -bad %s (%s) passes -focus '%s': nothing to bisect (a flaky spec? ensemble flake -n 10 -focus '%s' tells)\n", c.bad, bad[:12], c.focus, c.focus)
		}
		return 1, nil
	case "skip":
		fmt.Fprintf(errOut, "bisect: -bad %s (%s) cannot be tested (see the line above): pick a -bad that builds and has the spec\n", c.bad, bad[:12])
		return 1, nil
	}
	if v, err = b.testAt(good); err != nil {
		return 130, err
	}
	switch v {
	case "skip":
		fmt.Fprintf(errOut, "bisect: -good %s (%s) cannot be tested (see the line above): pick a -good that builds and has the spec\n", c.good, good[:12])
		return 1, nil
	case "bad":
		fmt.Fprintf(errOut, "bisect: -good %s (%s) fails -focus '%s' too: pick an older -good. Its failure:\n", c.good, good[:12], c.focus)
		b.failureOf(errOut, good)
		return 1, nil
	}

	fmt.Fprintln(out, "bisecting:")
	said, err := b.gitWT("bisect", "start", bad, good)
	if err != nil {
		return 2, fmt.Errorf("git bisect start: %v", err)
	}
	for !strings.Contains(said, "is the first bad commit") && !strings.Contains(said, "only 'skip'ped commits left") {
		head, err := b.gitWT("rev-parse", "HEAD")
		if err != nil {
			return 2, err
		}
		v, err := b.step(head)
		if err != nil {
			return 130, err
		}
		// git bisect skip says it cannot go on with a non-zero exit; its words are what is read.
		said, err = b.gitWT("bisect", v)
		if err != nil && !strings.Contains(said, "only 'skip'ped commits left") {
			return 2, fmt.Errorf("git bisect %s: %v", v, err)
		}
	}

	if strings.Contains(said, "is the first bad commit") {
		first, err := b.gitWT("rev-parse", "refs/bisect/bad")
		if err != nil {
			return 2, err
		}
		subject, _ := b.gitWT("log", "-1", "--format=%s", first)
		author, _ := b.gitWT("log", "-1", "--format=  author %an <%ae>, %ad", "--date=iso", first)
		stat, _ := b.gitWT("show", "--stat", "--format=", first)
		fmt.Fprintf(out, "\nfirst bad commit: %s %s\n%s\n%s\n", first, subject, author, indent(stat, "  "))
		if _, err := os.Stat(filepath.Join(b.steps, first, "verdict")); err != nil {
			if _, err := b.testAt(first); err != nil {
				return 130, err
			}
		}
		fmt.Fprintf(out, "\n-focus '%s' at %s:\n", c.focus, first[:12])
		b.failureOf(out, first)
		return 0, nil
	}
	fmt.Fprintln(out, "\nbisect: the first bad commit is one of these (the others between could not be tested):")
	_, rest, _ := strings.Cut(said, "could be any of:\n")
	rest, _, _ = strings.Cut(rest, "We cannot bisect more")
	for _, h := range strings.Fields(rest) {
		line, _ := b.gitWT("log", "-1", "--format=%H %s", h)
		fmt.Fprintf(out, "  %s\n", line)
	}
	return 1, nil
}

// git runs git in dir with args, without the caller's hooks, and returns its trimmed output (stdout and
// stderr). Errors: a non-zero exit, with that output.
func git(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	out, err := cmd.CombinedOutput()
	s := strings.TrimSpace(string(out))
	if err != nil {
		return s, fmt.Errorf("%w: %s", err, s)
	}
	return s, nil
}

// gitWT runs git in the worktree, its hooks off.
func (b *bisector) gitWT(args ...string) (string, error) {
	return git(b.wt, append([]string{"-c", "core.hooksPath=/dev/null"}, args...)...)
}

// testAt checks rev out in the worktree and tests it outside git bisect, returning the step's verdict.
func (b *bisector) testAt(rev string) (string, error) {
	if _, err := b.gitWT("checkout", "-q", "--detach", rev); err != nil {
		return "", err
	}
	return b.step(rev)
}

// step tests the worktree's HEAD, hash: it records and prints its verdict (good, bad or skip: git bisect's
// words) and leaves the worktree clean for the next checkout. Errors: only errInterrupted.
func (b *bisector) step(hash string) (string, error) {
	subject, _ := b.gitWT("log", "-1", "--format=%s", "HEAD")
	dir := filepath.Join(b.steps, hash)
	_ = os.RemoveAll(dir)
	_ = os.MkdirAll(dir, 0o755)
	start := time.Now()
	verdict, reason := b.judge(dir)
	if b.ctx.Err() != nil {
		return "", errInterrupted
	}
	_ = os.WriteFile(filepath.Join(dir, "verdict"), []byte(verdict+"\n"), 0o644)
	if reason != "" {
		reason = "  (" + reason + ")"
	}
	fmt.Fprintf(b.out, "  %s  %-7s %4ds  %s%s\n", hash[:12], verdict, int(time.Since(start).Seconds()), subject, reason)
	// Whatever the step wrote into the worktree goes.
	_, _ = b.gitWT("reset", "-q", "--hard", "HEAD")
	_, _ = b.gitWT("clean", "-qfdx")
	return verdict, nil
}

// judge builds and tests the worktree's HEAD into dir (build.log, test.log, report.json, artifacts/) and
// returns the verdict and why, for a skip or a bad.
func (b *bisector) judge(dir string) (verdict, reason string) {
	report, testLog := filepath.Join(dir, "report.json"), filepath.Join(dir, "test.log")
	notBuilt := func(log string) (string, string) {
		return "skip", "does not build: " + firstCompileLine(log)
	}
	code := 0
	if b.testCmd != "" {
		if log, err := b.shell(dir, "build.log", b.buildCmd, nil); err != nil {
			return notBuilt(log)
		}
		_, err := b.shell(dir, "test.log", b.testCmd, []string{"FOCUS=" + b.focus, "BISECT_REPORT=" + report})
		code = exitCode(err)
	} else {
		suite := filepath.Join(b.wt, b.rel)
		if tests, _ := filepath.Glob(filepath.Join(suite, "*_test.go")); len(tests) == 0 {
			return "skip", "no suite at " + filepath.ToSlash(b.rel) + " at this commit"
		}
		bin := filepath.Join(dir, "suite.test")
		defer os.Remove(bin)
		if err := suitebin.Compile(b.ctx, suite, bin); err != nil {
			_ = os.WriteFile(filepath.Join(dir, "build.log"), []byte(err.Error()), 0o644)
			return notBuilt(err.Error())
		}
		log, err := os.Create(testLog)
		if err != nil {
			return "skip", err.Error()
		}
		args := append([]string{"-test.v", "-ginkgo.v", "-ginkgo.focus=" + b.focus}, strings.Fields(b.ginkgoFlags)...)
		env := []string{"ENSEMBLE_ARTIFACTS=" + filepath.Join(dir, "artifacts"), "KUBEBUILDER_ASSETS=" + b.assets}
		res, err := ginkgoreport.RunSuite(b.ctx, bin, suite, args, env, b.timeout, report, log)
		log.Close()
		code = res.Code
		if err != nil && code == 0 {
			code = 1 // it wrote no report or could not start: not a pass
		}
	}
	if code == 0 {
		if reports, err := ginkgoreport.Read(report); err == nil && len(ginkgoreport.Ran(reports)) == 0 {
			return "skip", "-focus selects no spec at this commit"
		}
	}
	switch code {
	case 0:
		return "good", ""
	case 125:
		return "skip", "the test command said skip"
	}
	return "bad", fmt.Sprintf("exit %d", code)
}

// shell runs command with bash in the worktree, with env added and its output to dir/logName, and returns
// that output. Errors: a non-zero exit.
func (b *bisector) shell(dir, logName, command string, env []string) (string, error) {
	cmd := exec.Command("bash", "-c", command)
	cmd.Dir = b.wt
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := proc.Run(b.ctx, cmd)
	_ = os.WriteFile(filepath.Join(dir, logName), out.Bytes(), 0o644)
	return out.String(), err
}

// exitCode is the exit code err says (1 for a command that could not run).
func exitCode(err error) int {
	if code, ok := proc.ExitCode(err); ok {
		return code
	}
	return 1
}

// compileLine is a compiler's error line: file.go:line.
var compileLine = regexp.MustCompile(`\.go:[0-9]+`)

// firstCompileLine is a build log's first compiler error line, else its last line.
func firstCompileLine(log string) string {
	lines := strings.Split(strings.TrimSpace(log), "\n")
	for _, l := range lines {
		if compileLine.MatchString(l) {
			return strings.TrimSpace(l)
		}
	}
	return lines[len(lines)-1]
}

// failureOf prints the failure the step at hash recorded: from its JSON report, else the lines of its test
// log that say a test failed. Without -report-dir, a step that wrote failure dumps is moved out of the
// temporary directory first, so that the dump paths it prints still exist.
func (b *bisector) failureOf(w io.Writer, hash string) {
	dir := filepath.Join(b.steps, hash)
	shown := dir
	if ents, _ := os.ReadDir(filepath.Join(dir, "artifacts")); b.reportDir == "" && len(ents) > 0 {
		if kept, err := os.MkdirTemp("", "ensemble-bisect-"+hash[:12]+"-"); err == nil {
			all, _ := os.ReadDir(dir)
			for _, e := range all {
				_ = os.Rename(filepath.Join(dir, e.Name()), filepath.Join(kept, e.Name()))
			}
			shown = kept
		}
	}
	printed := false
	if reports, err := ginkgoreport.Read(filepath.Join(shown, "report.json")); err == nil {
		var buf bytes.Buffer
		if ginkgoreport.Failures(&buf, reports, b.wt, 60) > 0 {
			fmt.Fprint(w, indent(strings.ReplaceAll(buf.String(), dir, shown), "  ")+"\n")
			printed = true
		}
	}
	if log, err := os.ReadFile(filepath.Join(shown, "test.log")); !printed && err == nil && len(log) > 0 {
		fmt.Fprintln(w, indent(failLines(string(log)), "  "))
	}
	switch {
	case shown != dir:
		fmt.Fprintf(w, "  (this step's build log, test log, JSON report and failure dumps are kept in %s; -report-dir keeps every step's)\n", shown)
	case b.reportDir != "":
		fmt.Fprintf(w, "  (its build log, test log, JSON report and failure dumps are in %s)\n", dir)
	default:
		fmt.Fprintln(w, "  (-report-dir keeps each step's logs, JSON report and failure dumps)")
	}
}

// failLine is a test log's line that says something failed.
var failLine = regexp.MustCompile(`^\s*--- FAIL|^panic:|\[FAILED\]|^FAIL|_test\.go:[0-9]+:`)

// failLines is what a test log says of its failure: each failing line and the 4 after it (groups apart
// separated by "--"), at most 40 lines; the log's last 20 lines when no line says so.
func failLines(log string) string {
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	var out []string
	next := -1 // the first line not yet shown
	for i := 0; i < len(lines) && len(out) < 40; i++ {
		if !failLine.MatchString(lines[i]) {
			continue
		}
		if next >= 0 && i > next {
			out = append(out, "--")
		}
		for j := max(i, next); j <= min(i+4, len(lines)-1) && len(out) < 40; j++ {
			out = append(out, lines[j])
		}
		next = min(i+5, len(lines))
	}
	if len(out) == 0 {
		return suitebin.Tail(log, 20)
	}
	return strings.Join(out, "\n")
}

// indent prefixes each line of s with prefix, and drops s's last newline.
func indent(s, prefix string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i := range lines {
		lines[i] = prefix + lines[i]
	}
	return strings.Join(lines, "\n")
}
