// The self-test of ensemble bisect bisects a tiny Go module's history with `go test` (-test-cmd), so it
// needs neither envtest nor a scenario suite. The command runs as a process of its own, as a user runs it:
// the test binary, which TestMain turns into the command when asCommand is set.
package bisect

import (
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ensembletest/ensemble/internal/proc"
)

// asCommand, in a test binary's environment, makes it run the command with its arguments instead of the
// tests.
const asCommand = "ENSEMBLE_TEST_BISECT_AS_COMMAND"

func TestMain(m *testing.M) {
	if os.Getenv(asCommand) == "1" {
		ctx, stop := proc.SignalContext()
		code := Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// history is the tiny module's commits, oldest first: each writes the files it names ("" deletes one).
// Commit 2 does not compile, commit 3 repairs it, and TestSum fails from commit 4 on.
var history = []struct {
	subject string
	files   map[string]string
}{
	{"add Sum and its test", map[string]string{
		"go.mod":      "module tiny\n\ngo 1.21\n",
		"sum.go":      "package tiny\n\n// Sum adds.\nfunc Sum(a, b int) int { return a + b }\n",
		"sum_test.go": "package tiny\n\nimport \"testing\"\n\nfunc TestSum(t *testing.T) {\n\tif got := Sum(2, 3); got != 5 {\n\t\tt.Fatalf(\"Sum(2, 3) = %d, want 5\", got)\n\t}\n}\n",
	}},
	{"start Mul (does not compile)", map[string]string{"mul.go": "package tiny\n\nfunc Mul(a, b int) int { return a * c }\n"}},
	{"repair Mul", map[string]string{"mul.go": "package tiny\n\nfunc Mul(a, b int) int { return a * b }\n"}},
	{"rewrite Sum without the plus", map[string]string{"sum.go": "package tiny\n\n// Sum adds.\nfunc Sum(a, b int) int { return a - -b - 2*b }\n"}},
	{"add a README", map[string]string{"README": "tiny\n"}},
	{"document Mul", map[string]string{"mul.go": "package tiny\n\n// Mul multiplies.\nfunc Mul(a, b int) int { return a * b }\n"}},
}

// testCmd is what each bisect step runs in the tiny module instead of the scenario suite.
const testCmd = `go test -count=1 -run "$FOCUS" ./...`

// env is the environment of every git and go command here and of the command: no user or system git config
// (no hooks, signing or templates of the machine), a fixed identity, and Go without workspaces or
// toolchain switches. TMPDIR is the test's own, so leftovers can be seen.
func env(tmp string, extra ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(k, "GIT_"), k == "GOFLAGS", k == "GOWORK", k == "GOTOOLCHAIN", k == "TMPDIR",
			k == "FOCUS", k == "KUBEBUILDER_ASSETS", strings.HasPrefix(k, "BISECT_"):
			continue
		}
		out = append(out, kv)
	}
	out = append(out, "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com",
		"GOWORK=off", "GOTOOLCHAIN=local", "GOFLAGS=", "TMPDIR="+tmp)
	return append(out, extra...)
}

func runGit(t *testing.T, dir string, environ []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env = dir, environ
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// tinyRepo builds the history in a new repository on branch main, then leaves its checkout dirty the way a
// user's is: a modified tracked file, a staged change, an untracked file and a stale index. It returns the repository
// and the commits' hashes, oldest first.
func tinyRepo(t *testing.T, tmp string) (string, []string) {
	t.Helper()
	repo := filepath.Join(t.TempDir(), "tiny")
	if err := os.MkdirAll(repo, 0o755); err != nil {
		t.Fatal(err)
	}
	e := env(tmp)
	runGit(t, repo, e, "git", "init", "-q", "-b", "main")
	var hashes []string
	for _, c := range history {
		for name, content := range c.files {
			if err := os.WriteFile(filepath.Join(repo, name), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		runGit(t, repo, e, "git", "add", "-A")
		runGit(t, repo, e, "git", "commit", "-q", "-m", c.subject)
		hashes = append(hashes, runGit(t, repo, e, "git", "rev-parse", "HEAD"))
	}
	for name, content := range map[string]string{"README": "tiny, edited\n", "notes.txt": "untracked\n", "mul.go": "package tiny\n\n// Mul: staged.\nfunc Mul(a, b int) int { return a * b }\n"} {
		if err := os.WriteFile(filepath.Join(repo, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	runGit(t, repo, e, "git", "add", "mul.go")
	// Leave the index stale too (sum.go's stat data no longer matches it): a `git status` in the caller's
	// checkout would rewrite the index file, and the test would see it.
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(filepath.Join(repo, "sum.go"), later, later); err != nil {
		t.Fatal(err)
	}
	return repo, hashes
}

// state is everything of the caller's checkout the bisect must leave as it was: HEAD (the branch and its
// commit), the index file's bytes, every working-tree file's content, the worktree list, bisect state and
// refs. The index is hashed first, before any git command could refresh it.
func state(t *testing.T, repo string, e []string) string {
	t.Helper()
	var b strings.Builder
	idx, err := os.ReadFile(filepath.Join(repo, ".git", "index"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&b, "index %x\n", sha256.Sum256(idx))
	var files []string
	err = filepath.WalkDir(repo, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".git" {
			return filepath.SkipDir
		}
		if !d.IsDir() {
			c, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(repo, p)
			files = append(files, fmt.Sprintf("file %s %x", rel, sha256.Sum256(c)))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	b.WriteString(strings.Join(files, "\n") + "\n")
	head, _ := os.ReadFile(filepath.Join(repo, ".git", "HEAD"))
	fmt.Fprintf(&b, "HEAD %s", head)
	fmt.Fprintf(&b, "at %s\n", runGit(t, repo, e, "git", "rev-parse", "HEAD"))
	fmt.Fprintf(&b, "worktrees:\n%s\n", runGit(t, repo, e, "git", "worktree", "list", "--porcelain"))
	fmt.Fprintf(&b, "refs:\n%s\n", runGit(t, repo, e, "git", "for-each-ref"))
	for _, f := range []string{"BISECT_LOG", "BISECT_START", "BISECT_TERMS", "worktrees"} {
		if _, err := os.Stat(filepath.Join(repo, ".git", f)); err == nil {
			fmt.Fprintf(&b, ".git/%s exists\n", f)
		}
	}
	// Plumbing only: `git diff` and `git status` may rewrite a stale index (its stat data), and the index's
	// bytes are what is compared.
	fmt.Fprintf(&b, "unstaged:\n%s\nstaged:\n%s\n", runGit(t, repo, e, "git", "diff-files", "--name-status"),
		runGit(t, repo, e, "git", "diff-index", "--cached", "-p", "HEAD"))
	return b.String()
}

// tools skips the test when git, go or bash is missing.
func tools(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"git", "go", "bash"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed", tool)
		}
	}
}

// leftovers lists what the bisect left in the temp dir it was given.
func leftovers(t *testing.T, tmp string) []string {
	t.Helper()
	ents, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func TestBisectNamesTheFirstBadCommitAndLeavesTheCheckoutAlone(t *testing.T) {
	tools(t)
	tmp := t.TempDir()
	repo, hashes := tinyRepo(t, tmp)
	e := env(tmp)
	before := state(t, repo, e)

	start := time.Now()
	// The command bisects the checkout it is run in.
	cmd := bisectCmd(repo, tmp, nil, "-good", hashes[0], "-focus", "TestSum", "-test-cmd", testCmd)
	outb, err := cmd.CombinedOutput()
	out := string(outb)
	t.Logf("bisect took %s:\n%s", time.Since(start).Round(time.Millisecond), out)
	if err != nil {
		t.Fatalf("bisect failed: %v", err)
	}

	want := "first bad commit: " + hashes[3] + " " + history[3].subject
	if !strings.Contains(out, want) {
		t.Errorf("the output does not name commit 4: want %q", want)
	}
	if !strings.Contains(out, "Sum(2, 3) = -1, want 5") {
		t.Error("the output does not show the failing test's message at commit 4")
	}
	// Commit 2 does not compile: if bisect tested it, it was skipped, never called good or bad.
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, hashes[1][:12]) && !strings.Contains(line, "skip") {
			t.Errorf("commit 2, which does not compile, was not skipped: %q", line)
		}
	}
	if after := state(t, repo, e); after != before {
		t.Errorf("the caller's checkout changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if l := leftovers(t, tmp); len(l) > 0 {
		t.Errorf("bisect left %v in its temp dir", l)
	}
}

func TestBisectSkipsACommitThatDoesNotCompile(t *testing.T) {
	tools(t)
	tmp := t.TempDir()
	repo, hashes := tinyRepo(t, tmp)
	// BAD is commit 3 (Sum still right): with GOOD commit 1 the only commit between is 2, which bisect must
	// test; make TestSum fail at 3 by focusing a test command that fails from 3 on (mul.go compiles there).
	cmd := bisectCmd(repo, tmp, nil, "-good", hashes[0], "-bad", hashes[2], "-focus", "TestSum",
		"-test-cmd", "test ! -f mul.go && "+testCmd)
	outb, err := cmd.CombinedOutput()
	out := string(outb)
	t.Logf("%s", out)
	if err == nil {
		t.Fatal("bisect succeeded, yet the only commit between cannot be tested")
	}
	if !strings.Contains(out, hashes[1][:12]+"  skip") || !strings.Contains(out, "does not build: ./mul.go:3") {
		t.Errorf("commit 2 was not tested and skipped with its compile error")
	}
	if !strings.Contains(out, "the first bad commit is one of these") || !strings.Contains(out, hashes[1]+" "+history[1].subject) ||
		!strings.Contains(out, hashes[2]+" "+history[2].subject) {
		t.Errorf("the output does not name the two candidates")
	}
}

func TestBisectSaysWhatToPass(t *testing.T) {
	tools(t)
	tmp := t.TempDir()
	repo, hashes := tinyRepo(t, tmp)
	for _, c := range []struct {
		dir  string
		args []string
		want string
	}{
		{tmp, []string{"-focus", "TestSum"}, "bisect: pass -good (make's GOOD) <rev>"},
		{tmp, []string{"-good", "HEAD~2"}, "bisect: pass -focus (make's FOCUS) <spec regexp>"},
		{tmp, []string{"-good", "HEAD~2", "-focus", "x", "-timeout", "0s"}, "bisect: -timeout (make's SUITE_TIMEOUT) is 0s"},
		{tmp, []string{"-good", "HEAD~2", "-focus", "x", "more"}, `bisect: unexpected argument "more"`},
		{tmp, []string{"-good", "HEAD~2", "-focus", "x"}, "bisect: run it inside a git checkout"},
		{repo, []string{"-good", "nosuch", "-focus", "x"}, "bisect: -good (make's GOOD) nosuch is not a commit of "},
		{repo, []string{"-good", hashes[3], "-bad", hashes[1], "-focus", "x"}, "bisect: -good " + hashes[3] + " (" + hashes[3][:12] + ") is not an ancestor of -bad"},
		{repo, []string{"-good", "HEAD", "-focus", "x"}, "bisect: -good HEAD and -bad HEAD are the same commit"},
		{repo, []string{"-good", "HEAD~1", "-focus", "x", "-suite", "nodir"}, "bisect: -suite nodir has no _test.go file"},
	} {
		cmd := bisectCmd(c.dir, tmp, nil, c.args...)
		out, err := cmd.CombinedOutput()
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if exitCode(err) != 2 || len(lines) != 1 || !strings.HasPrefix(lines[0], c.want) {
			t.Errorf("with %q in %s: err %v, want exit 2 and one line starting %q, got:\n%s", c.args, c.dir, err, c.want, out)
		}
	}
	cmd := bisectCmd(tmp, tmp, nil, "-h")
	if out, err := cmd.CombinedOutput(); err != nil || !strings.HasPrefix(string(out), "usage: "+Synopsis) {
		t.Errorf("-h: %v\n%s", err, out)
	}
}

// Ctrl-C (SIGINT to the whole process group, as a terminal sends it) in the middle of a step: the worktree
// and the temp dir are removed and the checkout is as it was.
func TestBisectCleansUpOnCtrlC(t *testing.T) {
	tools(t)
	tmp := t.TempDir()
	repo, hashes := tinyRepo(t, tmp)
	e := env(tmp)
	before := state(t, repo, e)
	mark := filepath.Join(t.TempDir(), "step-started")

	cmd := bisectCmd(repo, tmp, []string{"MARK=" + mark}, "-good", hashes[0], "-focus", "TestSum", "-test-cmd", `echo $$ >"$MARK"; exec sleep 30`)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	kill := func(why string) {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done // the output is complete only once the command was reaped
		t.Fatalf("%s:\n%s", why, out.String())
	}
	// The step has begun once its mark names its shell and the shell has become the sleep: a SIGINT sent
	// before would reach the shell, and the sleep would then run its 30 s out. The step runs in a process
	// group of its own (proc.Run), which the command ends on its own SIGINT. The bounds only end a test
	// that went wrong: a loaded machine (a load of 25 on 2 cores) took more than 15 s to reach the step.
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	giveUp := time.After(2 * time.Minute)
	for started := false; !started; {
		select {
		case err := <-done:
			done <- err
			kill(fmt.Sprintf("bisect ended (%v) before a step began", err))
		case <-giveUp:
			kill("no step began within 2 minutes")
		case <-poll.C:
		}
		if pid, err := os.ReadFile(mark); err == nil {
			comm, err := os.ReadFile("/proc/" + strings.TrimSpace(string(pid)) + "/comm")
			started = err == nil && string(comm) == "sleep\n"
		}
	}
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if code := exitCode(err); code != 130 {
			t.Errorf("bisect exited %d after Ctrl-C, want 130", code)
		}
	case <-time.After(2 * time.Minute):
		kill("bisect did not end within 2 minutes of Ctrl-C")
	}
	t.Logf("%s", out.String())
	if !strings.Contains(out.String(), "interrupted; the worktree is removed") {
		t.Error("bisect did not say it was interrupted")
	}
	if after := state(t, repo, e); after != before {
		t.Errorf("the caller's checkout changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if l := leftovers(t, tmp); len(l) > 0 {
		t.Errorf("bisect left %v in its temp dir", l)
	}
}

// A BAD that passes as committed in a checkout with uncommitted changes: the last line says the changes
// are not bisected, not only that the spec may be flaky.
func TestBisectOnADirtyCheckoutSaysTheChangesAreNotBisected(t *testing.T) {
	tools(t)
	tmp := t.TempDir()
	// tinyRepo's checkout has uncommitted changes; BAD is commit 3, at which TestSum passes.
	repo, hashes := tinyRepo(t, tmp)
	cmd := bisectCmd(repo, tmp, nil, "-good", hashes[0], "-bad", hashes[2], "-focus", "TestSum", "-test-cmd", testCmd)
	outb, err := cmd.CombinedOutput()
	lines := strings.Split(strings.TrimSpace(string(outb)), "\n")
	last := lines[len(lines)-1]
	if err == nil || !strings.Contains(last, "as committed passes -focus 'TestSum', and your checkout has uncommitted changes to ") ||
		!strings.Contains(last, "files, which bisect never tests: if they make the spec fail, commit them first") {
		t.Errorf("err %v, last line %q:\n%s", err, last, outb)
	}
	if l := leftovers(t, tmp); len(l) > 0 {
		t.Errorf("bisect left %v in its temp dir", l)
	}
}

// bisectCmd is the command (ensemble bisect args...) run in dir, with env(tmp, vars...) as its environment.
func bisectCmd(dir, tmp string, vars []string, args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Dir = dir
	cmd.Env = append(env(tmp, vars...), asCommand+"=1")
	return cmd
}
