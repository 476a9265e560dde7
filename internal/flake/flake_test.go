package flake

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeAssets points KUBEBUILDER_ASSETS at a directory that holds files named as the envtest binaries: the
// tiny suite boots nothing, and the command only checks that they are there.
func fakeAssets(t *testing.T) {
	t.Helper()
	dir := t.TempDir()
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if err := os.WriteFile(filepath.Join(dir, b), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("KUBEBUILDER_ASSETS", dir)
}

// flaky runs the command on testdata/flaky, whose "counts" spec fails on run failAt ("0": never), with
// TMPDIR a directory of its own; it returns the exit code, the output, stderr and that directory.
func flaky(t *testing.T, failAt string, args ...string) (int, string, string, string) {
	t.Helper()
	fakeAssets(t)
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	t.Setenv("FLAKY_COUNTER", filepath.Join(t.TempDir(), "counter"))
	t.Setenv("FLAKY_FAIL_AT", failAt)
	var out, errb bytes.Buffer
	code := Main(context.Background(), append([]string{"-suite", "testdata/flaky"}, args...), &out, &errb)
	t.Logf("exit %d\n%s%s", code, out.String(), errb.String())
	return code, out.String(), errb.String(), tmp
}

func TestEveryRunPassesAndTheTimesAreSummed(t *testing.T) {
	code, out, _, tmp := flaky(t, "0", "-n", "3")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, s := range []string{"run 1/3: passed in ", "(2 specs)", "3/3 passed in ", "-report-dir keeps them",
		"min  median", "  spec\n", "   3  ", "flaky counts", "flaky steady", "(whole suite run)"} {
		if !strings.Contains(out, s) {
			t.Errorf("the output lacks %q", s)
		}
	}
	if ents, _ := os.ReadDir(tmp); len(ents) > 0 {
		t.Errorf("a passing flake left %v in its temporary directory", ents)
	}
}

func TestTheFirstFailingRunStopsItAndIsKept(t *testing.T) {
	code, out, _, tmp := flaky(t, "2", "-n", "3", "-focus", "counts")
	if code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	for _, s := range []string{"running the specs of -focus 'counts' 3 times; runs under ", "run 1/3: passed in ", "(1 spec)",
		"run 2/3: FAILED in ", "(1 spec ran; 1 of 3 runs passed before it)", "  FAILED flaky counts",
		"run 2 fails on purpose", "failure dumps of run 2: none written under ", "run 2's verbose output: "} {
		if !strings.Contains(out, s) {
			t.Errorf("the output lacks %q", s)
		}
	}
	if strings.Contains(out, "run 3/3") {
		t.Error("a run after the failing one ran")
	}
	// The runs stay, named, for their reports; the compiled suite goes.
	runs, err := filepath.Glob(filepath.Join(tmp, "ensemble-flake-*", "run-2", "suite.json"))
	if err != nil || len(runs) != 1 || !strings.Contains(out, filepath.Join(filepath.Dir(runs[0]), "output.log")) {
		t.Errorf("the failing run's report: %v, %v", runs, err)
	}
	if bins, _ := filepath.Glob(filepath.Join(tmp, "ensemble-flake-*", "suite.test")); len(bins) > 0 {
		t.Errorf("the compiled suite was left: %v", bins)
	}
}

func TestAFocusThatSelectsNothingFails(t *testing.T) {
	code, out, _, _ := flaky(t, "0", "-n", "2", "-focus", "no such spec")
	if code != 1 || !strings.Contains(out, "run 1/2: FAILED") || !strings.Contains(out, "select no spec: check -focus and -labels") {
		t.Errorf("exit %d, want 1 and the run named as selecting no spec", code)
	}
}

func TestBadInputIsOneLine(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "flake: pass -n (make's N) <runs>, how many times to run the suite, 1 or more, e.g. -n 10 -focus harness"},
		{[]string{"-n", "0"}, "flake: pass -n (make's N) <runs>"},
		{[]string{"-n", "ten"}, `flake: -n (make's N): invalid value "ten": pass a whole number`},
		{[]string{"-n", "2", "-timeout", "0s"}, "flake: -timeout (make's SUITE_TIMEOUT) is 0s: pass each run's limit, such as 20m"},
		{[]string{"-n", "2", "-suite", "testdata"}, "flake: -suite testdata has no _test.go file"},
		{[]string{"-n", "2", "extra"}, `flake: unexpected argument "extra"`},
	} {
		var out, errb bytes.Buffer
		code := Main(context.Background(), tc.args, &out, &errb)
		lines := strings.Split(strings.TrimSpace(errb.String()), "\n")
		if code != 2 || len(lines) != 1 || !strings.HasPrefix(lines[0], tc.want) || out.Len() > 0 {
			t.Errorf("%q: exit %d, stderr %q, stdout %q; want exit 2 and one line starting %q", tc.args, code, errb.String(), out.String(), tc.want)
		}
	}
	var out, errb bytes.Buffer
	if code := Main(context.Background(), []string{"-h"}, &out, &errb); code != 0 || !strings.HasPrefix(errb.String(), "usage: "+Synopsis) {
		t.Errorf("-h: exit %d, stderr %q", code, errb.String())
	}
}
