// Package browser holds the self-test of browser.sh (make browser, a prerequisite of make test): its lookup
// order against chromedp's own list, CHROME, and the apt-get install, all with fake executables on a PATH of
// the test's own, so nothing on the machine is installed or removed.
package browser

import (
	"bytes"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// chromedpLocations returns the names and paths chromedp's findExecPath tries on Linux, in order, read from
// the default case of execLocations in the allocate.go of go.mod's chromedp (they are not exported).
func chromedpLocations(t *testing.T) []string {
	t.Helper()
	dir, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/chromedp/chromedp").Output()
	if err != nil {
		t.Fatalf("go list -m github.com/chromedp/chromedp: %v", err)
	}
	file := filepath.Join(strings.TrimSpace(string(dir)), "allocate.go")
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var locations []string
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Name.Name != "execLocations" {
			continue
		}
		ast.Inspect(fn, func(n ast.Node) bool {
			c, ok := n.(*ast.CaseClause)
			if !ok || c.List != nil {
				return true
			}
			ast.Inspect(c, func(n ast.Node) bool {
				if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					s, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatal(err)
					}
					locations = append(locations, s)
				}
				return true
			})
			return false
		})
	}
	if !slices.Contains(locations, "chromium") || !slices.Contains(locations, "google-chrome") {
		t.Fatalf("%s: the default case of execLocations no longer lists chromium and google-chrome (got %q): read chromedp's lookup again and update browser.sh's list", file, locations)
	}
	return locations
}

// machine is a fake machine for browser.sh: bin is its only PATH directory besides env, root is put before the
// absolute paths of the script's list (BROWSER_ROOT), and log collects what the fake apt-get and sudo ran.
type machine struct {
	t              *testing.T
	bash           string
	bin, root, log string
	tools          string
}

func newMachine(t *testing.T) *machine {
	t.Helper()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal(err)
	}
	env, err := exec.LookPath("env")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	m := &machine{t: t, bash: bash, bin: filepath.Join(dir, "bin"), root: filepath.Join(dir, "root"),
		log: filepath.Join(dir, "log"), tools: filepath.Join(dir, "tools")}
	for _, d := range []string{m.bin, m.root, m.tools} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(env, filepath.Join(m.tools, "env")); err != nil {
		t.Fatal(err)
	}
	m.script("id", `echo 0`) // root, unless a test says otherwise
	return m
}

// path is where the fake of a location of the list is: on PATH for a name, under root for an absolute path.
func (m *machine) path(location string) string {
	if filepath.IsAbs(location) {
		return filepath.Join(m.root, location)
	}
	return filepath.Join(m.bin, location)
}

// script writes an executable bash script at name (a location of the list, or a tool on PATH) with body.
func (m *machine) script(name, body string) string {
	m.t.Helper()
	p := m.path(name)
	if name == "id" || name == "env" {
		p = filepath.Join(m.tools, name)
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		m.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("#!"+m.bash+"\n"+body+"\n"), 0o755); err != nil {
		m.t.Fatal(err)
	}
	return p
}

// fakeAptGet writes an apt-get that logs its DEBIAN_FRONTEND and arguments and, for install, writes an
// executable chromium on PATH, or exits 100 when installs is false. Its update exits 100 with apt's message for
// a lists lock another apt-get holds when updates is false.
func (m *machine) fakeAptGet(installs, updates bool) {
	m.t.Helper()
	chmod, err := exec.LookPath("chmod")
	if err != nil {
		m.t.Fatal(err)
	}
	install := `printf '#!/bin/sh\n' >` + strconv.Quote(filepath.Join(m.bin, "chromium")) + ` && ` + chmod + ` +x ` +
		strconv.Quote(filepath.Join(m.bin, "chromium"))
	if !installs {
		install = `echo "E: Unable to locate package chromium" >&2; exit 100`
	}
	update := "exit 0"
	if !updates {
		update = `echo "E: Could not get lock /var/lib/apt/lists/lock. It is held by process 2332 (apt-get)" >&2; exit 100`
	}
	m.script("apt-get", `echo "apt-get DEBIAN_FRONTEND=$DEBIAN_FRONTEND $*" >>`+strconv.Quote(m.log)+`
[ "$1" = install ] || { `+update+`; }
`+install)
}

// run runs browser.sh with args on the fake machine, CHROME set to chrome when it is not "".
func (m *machine) run(chrome string, args ...string) (stdout, stderr string, code int) {
	m.t.Helper()
	cmd := exec.Command(m.bash, append([]string{"browser.sh"}, args...)...)
	cmd.Env = []string{"PATH=" + m.bin + ":" + m.tools, "BROWSER_ROOT=" + m.root, "HOME=" + m.t.TempDir()}
	if chrome != "" {
		cmd.Env = append(cmd.Env, "CHROME="+chrome)
	}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		m.t.Fatal(err)
	}
	return out.String(), errOut.String(), code
}

func (m *machine) logged() []string {
	m.t.Helper()
	b, err := os.ReadFile(m.log)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		m.t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

// oneLine checks that a failure said exactly one line that names CHROME, and nothing on stdout.
func oneLine(t *testing.T, what, stdout, stderr string, code int) {
	t.Helper()
	if code == 0 || stdout != "" || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "CHROME") {
		t.Errorf("%s: exit %d, stdout %q, stderr %q: want a non-zero exit, nothing on stdout and one line that names CHROME", what, code, stdout, stderr)
	}
}

// Each location of chromedp's list in turn is the first one present: the script must find it, not a later one.
func TestLookupOrderIsChromedps(t *testing.T) {
	locations := chromedpLocations(t)
	for i, want := range locations {
		m := newMachine(t)
		for _, l := range locations[i:] {
			m.script(l, "exit 0")
		}
		stdout, stderr, code := m.run("", "--find")
		if code != 0 || stdout != m.path(want)+"\n" {
			t.Errorf("with %q present: exit %d, stdout %q, stderr %q: want %s, chromedp's first", locations[i:], code, stdout, stderr, m.path(want))
		}
	}
	m := newMachine(t)
	if stdout, stderr, code := m.run("", "--find"); code != 1 || stdout != "" || stderr != "" {
		t.Errorf("with no browser, --find: exit %d, stdout %q, stderr %q: want exit 1 and nothing printed", code, stdout, stderr)
	}
}

func TestChromeComesFirst(t *testing.T) {
	m := newMachine(t)
	for _, l := range chromedpLocations(t) {
		m.script(l, "exit 0")
	}
	mine := m.script("/opt/mine/chrome", "exit 0")
	if stdout, stderr, code := m.run(mine); code != 0 || stdout != mine+"\n" {
		t.Errorf("CHROME=%s: exit %d, stdout %q, stderr %q: want CHROME itself", mine, code, stdout, stderr)
	}
	onPath := m.script("my-chrome", "exit 0")
	if stdout, stderr, code := m.run("my-chrome"); code != 0 || stdout != onPath+"\n" {
		t.Errorf("CHROME=my-chrome: exit %d, stdout %q, stderr %q: want %s, the name looked up on PATH", code, stdout, stderr, onPath)
	}
	stdout, stderr, code := m.run(filepath.Join(m.root, "missing"))
	oneLine(t, "CHROME=a missing file", stdout, stderr, code)
}

func TestNoBrowserNoAptGet(t *testing.T) {
	m := newMachine(t)
	stdout, stderr, code := m.run("")
	oneLine(t, "no browser and no apt-get", stdout, stderr, code)
	t.Logf("the line: %s", stderr)
}

func TestNoBrowserNoSudo(t *testing.T) {
	m := newMachine(t)
	m.script("id", "echo 1000")
	m.fakeAptGet(true, true)
	stdout, stderr, code := m.run("")
	oneLine(t, "no browser, not root and no sudo", stdout, stderr, code)
	if got := m.logged(); got != nil {
		t.Errorf("apt-get ran without sudo as a user: %q", got)
	}
	t.Logf("the line: %s", stderr)
}

func TestInstallsChromium(t *testing.T) {
	for _, asRoot := range []bool{true, false} {
		m := newMachine(t)
		m.fakeAptGet(true, true)
		want := []string{"apt-get DEBIAN_FRONTEND=noninteractive update -qq", "apt-get DEBIAN_FRONTEND=noninteractive install -y -qq -o DPkg::Lock::Timeout=600 chromium"}
		if !asRoot {
			m.script("id", "echo 1000")
			m.script("sudo", `echo "sudo $1" >>`+strconv.Quote(m.log)+`; exec "$@"`)
			want = []string{"sudo env", want[0], "sudo env", want[1]}
		}
		stdout, stderr, code := m.run("")
		if code != 0 || stdout != m.path("chromium")+"\n" {
			t.Errorf("root %v: exit %d, stdout %q, stderr %q: want the installed %s", asRoot, code, stdout, stderr, m.path("chromium"))
		}
		if got := m.logged(); !slices.Equal(got, want) {
			t.Errorf("root %v: ran %q, want %q", asRoot, got, want)
		}
	}
	m := newMachine(t)
	m.fakeAptGet(false, true)
	stdout, stderr, code := m.run("")
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	if code == 0 || stdout != "" || !strings.Contains(lines[len(lines)-1], "apt-get install chromium failed") {
		t.Errorf("a failing apt-get install: exit %d, stdout %q, stderr %q: want a non-zero exit whose last line says the install failed", code, stdout, stderr)
	}
}

// TestInstallsWhileAnotherAptGetHoldsTheLists is the case of two make test runs installing at once on a fresh
// machine (or a runner's unattended upgrades at boot): the second apt-get update finds the package lists locked,
// and the install still goes ahead, waiting for dpkg's lock.
func TestInstallsWhileAnotherAptGetHoldsTheLists(t *testing.T) {
	m := newMachine(t)
	m.fakeAptGet(true, false)
	stdout, stderr, code := m.run("")
	if code != 0 || stdout != m.path("chromium")+"\n" {
		t.Errorf("exit %d, stdout %q, stderr %q: want the installed %s", code, stdout, stderr, m.path("chromium"))
	}
	if !strings.Contains(stderr, "apt-get update failed") {
		t.Errorf("stderr %q: want a line saying the update failed", stderr)
	}
}
