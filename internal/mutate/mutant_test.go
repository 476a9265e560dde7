package mutate

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/onsi/ginkgo/v2/types"
)

const src = `package p

func f(a, b int) bool {
	if a >= b && -a != b {
		a++
	}
	return a-b < 0
}
`

func TestApply(t *testing.T) {
	for _, tc := range []struct {
		line, col  int
		kind, want string
	}{
		{4, 7, "CONDITIONALS_BOUNDARY", "\tif a > b && -a != b {"},
		{4, 7, "CONDITIONALS_NEGATION", "\tif a < b && -a != b {"},
		{4, 15, "INVERT_NEGATIVES", "\tif a >= b && +a != b {"},
		{4, 18, "CONDITIONALS_NEGATION", "\tif a >= b && -a == b {"},
		{5, 4, "INCREMENT_DECREMENT", "\t\ta--"},
		{7, 10, "ARITHMETIC_BASE", "\treturn a+b < 0"},
	} {
		out, m, err := apply([]byte(src), Mutant{File: "p.go", Line: tc.line, Col: tc.col, Kind: tc.kind})
		if err != nil {
			t.Fatalf("%d:%d %s: %v", tc.line, tc.col, tc.kind, err)
		}
		lines := strings.Split(string(out), "\n")
		if lines[tc.line-1] != tc.want {
			t.Errorf("%d:%d %s: line is %q, want %q", tc.line, tc.col, tc.kind, lines[tc.line-1], tc.want)
		}
		if len(lines) != len(strings.Split(src, "\n")) || m.From == "" || m.To == "" {
			t.Errorf("%d:%d %s: %d lines, %q -> %q", tc.line, tc.col, tc.kind, len(lines), m.From, m.To)
		}
	}
	// A position that holds no token of the kind is an error, never another mutant.
	for _, m := range []Mutant{
		{File: "p.go", Line: 4, Col: 7, Kind: "INCREMENT_DECREMENT"},   // >= is no ++
		{File: "p.go", Line: 4, Col: 8, Kind: "CONDITIONALS_NEGATION"}, // inside >=
		{File: "p.go", Line: 40, Col: 1, Kind: "CONDITIONALS_NEGATION"},
	} {
		if _, _, err := apply([]byte(src), m); err == nil {
			t.Errorf("%s %s: applied", m.Pos(), m.Kind)
		}
	}
}

func TestParseGremlins(t *testing.T) {
	js := `{"go_module":"m","files":[{"file_name":"b.go","mutations":[{"type":"CONDITIONALS_NEGATION","status":"NOT COVERED","line":3,"column":9}]},
	{"file_name":"a.go","mutations":[{"type":"CONDITIONALS_NEGATION","status":"RUNNABLE","line":7,"column":2},{"type":"CONDITIONALS_BOUNDARY","status":"RUNNABLE","line":7,"column":2}]}]}`
	ms, err := parseGremlins(strings.NewReader(js), "operators/x")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range ms {
		got = append(got, m.Pos()+" "+m.Kind)
	}
	want := []string{"operators/x/a.go:7:2 CONDITIONALS_BOUNDARY", "operators/x/a.go:7:2 CONDITIONALS_NEGATION", "operators/x/b.go:3:9 CONDITIONALS_NEGATION"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestCoverageSelectsTheSpecsThatRanAPosition(t *testing.T) {
	profiles := map[string]string{
		"x one": `mode: set
example.com/m/operators/x/a.go:10.20,12.3 2 1
example.com/m/operators/x/a.go:14.2,14.30 1 0
example.com/m/operators/x/b.go:5.1,5.40 1 1
`,
		"x two": `mode: set
example.com/m/operators/x/a.go:10.20,12.3 2 1
example.com/m/operators/x/a.go:14.2,14.30 1 3
example.com/m/operators/x/b.go:5.1,5.40 1 0
`,
		"x three": `mode: set
example.com/m/operators/x/a.go:10.20,12.3 2 0
example.com/m/operators/x/a.go:14.2,14.30 1 0
example.com/m/operators/x/b.go:5.1,5.40 1 0
`,
	}
	cov := Coverage{}
	for spec, p := range profiles {
		if err := cov.Read(strings.NewReader(p), "example.com/m", spec); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		file      string
		line, col int
		want      []string
	}{
		{"operators/x/a.go", 10, 20, []string{"x one", "x two"}},
		{"operators/x/a.go", 10, 19, nil}, // before the block on its first line
		{"operators/x/a.go", 11, 1, []string{"x one", "x two"}},
		{"operators/x/a.go", 12, 3, []string{"x one", "x two"}},
		{"operators/x/a.go", 12, 4, nil},
		{"operators/x/a.go", 14, 10, []string{"x two"}}, // a block only one spec ran
		{"operators/x/b.go", 5, 40, []string{"x one"}},
		{"operators/x/c.go", 5, 10, nil},
	} {
		if got := cov.Specs(tc.file, tc.line, tc.col); !reflect.DeepEqual(got, append([]string{}, tc.want...)) {
			t.Errorf("Specs(%s:%d:%d) = %q, want %q", tc.file, tc.line, tc.col, got, tc.want)
		}
	}
	err := Coverage{}.Read(strings.NewReader("mode: set\nnot a profile line\n"), "m", "x one")
	if err == nil || !strings.Contains(err.Error(), `"x one"`) {
		t.Errorf("a malformed line: %v", err)
	}
}

func TestFocusSelectsExactlyItsSpecs(t *testing.T) {
	const description = "ensemble scenarios (v2.*)"
	specs := []string{
		`multigres a pool scaled 2 -> 3: the late pooler's role lands in podRoles`,
		`multigres a cluster of 2 x 2 "shards" (one [PRIMARY] each) is Healthy?`,
		`multigres a|b ^c$ \d+ {1,2} .* +`,
		`multigres thrash`,
	}
	others := []string{
		`multigres a pool scaled 2 -> 3: the late pooler's role lands in podRoles and more`, // a selected text is its prefix
		`multigres thrash again`,
		`multigres a pool scaled 2 -> 3: the late pooler's role lands in podRole`,
		`multigres a cluster of 2 x 2 "shards" (one P each) is Healthy?`,
		`multigres a`, `b ^c$ \d+ {1,2} .* +`, // the halves of a text holding |
		`multigres ab c 12 xx +`,
	}
	re, err := regexp.Compile(focus(description, specs[:3]))
	if err != nil {
		t.Fatalf("focus does not compile: %v", err)
	}
	for _, s := range specs[:3] {
		if !re.MatchString(description + " " + s) {
			t.Errorf("%s does not select %q", re, s)
		}
	}
	for _, s := range append(others, specs[3]) {
		if re.MatchString(description + " " + s) {
			t.Errorf("%s selects %q", re, s)
		}
	}
	if re.MatchString(specs[0]) || re.MatchString("other suite "+specs[0]) {
		t.Errorf("%s ignores the suite's description", re)
	}
	one := regexp.MustCompile(focus(description, specs[3:]))
	if !one.MatchString(description+" "+specs[3]) || one.MatchString(description+" "+others[1]) {
		t.Errorf("%s: a single spec", one)
	}
}

func TestSelectedSpecsOfADryRun(t *testing.T) {
	it := func(state types.SpecState, containers []string, text string) types.SpecReport {
		return types.SpecReport{LeafNodeType: types.NodeTypeIt, State: state, ContainerHierarchyTexts: containers, LeafNodeText: text}
	}
	reports := []types.Report{{SuiteDescription: "ensemble scenarios", SpecReports: types.SpecReports{
		{LeafNodeType: types.NodeTypeBeforeSuite, State: types.SpecStatePassed},
		it(types.SpecStatePassed, []string{"multigres"}, "one"),
		it(types.SpecStateSkipped, []string{"matrixone"}, "two"),
		it(types.SpecStatePending, []string{"multigres"}, "three"),
		it(types.SpecStatePassed, []string{"multigres", "sequences"}, "four"),
		it(types.SpecStatePassed, []string{"multigres"}, "one"), // the same full text twice
		{LeafNodeType: types.NodeTypeAfterSuite, State: types.SpecStatePassed},
	}}}
	d, specs := selected(reports)
	if want := []string{"multigres one", "multigres sequences four"}; d != "ensemble scenarios" || !reflect.DeepEqual(specs, want) {
		t.Errorf("selected = %q, %q; want %q", d, specs, want)
	}
}

func TestDefaultLabels(t *testing.T) {
	for pkg, want := range map[string]string{
		"operators/multigres":          "multigres",
		"operators/matrixone/hakeeper": "matrixone",
		"fakes/dataplane":              "",
		"operators":                    "",
		"controllers":                  "",
	} {
		if got := defaultLabels(pkg); got != want {
			t.Errorf("defaultLabels(%s) = %q, want %q", pkg, got, want)
		}
	}
}

func TestParseDiff(t *testing.T) {
	diff := `diff --git a/operators/x/a.go b/operators/x/a.go
index 1111111..2222222 100644
--- a/operators/x/a.go
+++ b/operators/x/a.go
@@ -3 +3 @@ func f() {
-	if a > b {
+	if a >= b {
@@ -10,0 +11,3 @@ func g() {
+	x++
+	y++
+	z++
@@ -20,2 +23,0 @@ func h() {
-	gone()
-	gone()
diff --git a/operators/x/old.go b/operators/x/old.go
deleted file mode 100644
--- a/operators/x/old.go
+++ /dev/null
@@ -1,2 +0,0 @@
-package x
-
diff --git a/operators/x/new.go b/operators/x/new.go
new file mode 100644
--- /dev/null
+++ b/operators/x/new.go
@@ -0,0 +1,2 @@
+package x
+var v = 1 - 2
`
	ch, err := parseDiff(strings.NewReader(diff))
	if err != nil {
		t.Fatal(err)
	}
	want := Changed{"operators/x/a.go": {{3, 3}, {11, 13}}, "operators/x/new.go": {{1, 2}}}
	if !reflect.DeepEqual(ch, want) {
		t.Fatalf("got %v, want %v", ch, want)
	}
	for _, tc := range []struct {
		file string
		line int
		want bool
	}{
		{"operators/x/a.go", 3, true}, {"operators/x/a.go", 4, false}, {"operators/x/a.go", 10, false},
		{"operators/x/a.go", 11, true}, {"operators/x/a.go", 13, true}, {"operators/x/a.go", 14, false},
		{"operators/x/a.go", 23, false}, // a pure deletion changes no line of the new file
		{"operators/x/new.go", 2, true}, {"operators/x/old.go", 1, false},
	} {
		if got := ch.Has(tc.file, tc.line); got != tc.want {
			t.Errorf("Has(%s, %d) = %v", tc.file, tc.line, got)
		}
	}
}

func TestPick(t *testing.T) {
	if got := pick(10, 0); len(got) != 10 {
		t.Errorf("pick(10, 0) = %v", got)
	}
	if got := pick(3, 5); !reflect.DeepEqual(got, []int{0, 1, 2}) {
		t.Errorf("pick(3, 5) = %v", got)
	}
	if got := pick(10, 4); !reflect.DeepEqual(got, []int{0, 2, 5, 7}) {
		t.Errorf("pick(10, 4) = %v", got)
	}
	if got := pick(0, 4); len(got) != 0 {
		t.Errorf("pick(0, 4) = %v", got)
	}
}

func TestClassifyRun(t *testing.T) {
	ginkgoFailure := `Running Suite: ensemble scenarios
• [FAILED] [12.003 seconds]
multigres [It] a cluster becomes Healthy
/work/main/scenarios/multigres_test.go:80

  [FAILED] Timed out after 10.001s.
------------------------------

Summarizing 1 Failure:
  [FAIL] multigres [It] a cluster becomes Healthy
  /work/main/scenarios/multigres_test.go:80

Ran 1 of 24 Specs in 15.2 seconds
FAIL! -- 0 Passed | 1 Failed | 0 Pending | 23 Skipped
--- FAIL: TestScenarios (15.20s)
FAIL
FAIL	github.com/ensembletest/ensemble/scenarios	15.9s
FAIL
`
	for _, tc := range []struct {
		name     string
		code     int
		deadline bool
		out      string
		status   Status
		detail   string
	}{
		{"passed", 0, false, "ok  \tgithub.com/ensembletest/ensemble/scenarios\t20.1s\n", Survived, ""},
		{"spec failed", 1, false, ginkgoFailure, Killed, "[FAIL] multigres [It] a cluster becomes Healthy"},
		{"plain test failed", 1, false, "--- FAIL: TestX (0.01s)\nFAIL\n", Killed, "--- FAIL: TestX (0.01s)"},
		{"go test -timeout", 1, false, "panic: test timed out after 2m0s\n", TimedOut, ""},
		{"killed at the deadline", -1, true, "", TimedOut, ""},
	} {
		s, d := classifyRun(tc.code, tc.deadline, tc.out)
		if s != tc.status || d != tc.detail {
			t.Errorf("%s: got %s %q, want %s %q", tc.name, s, d, tc.status, tc.detail)
		}
	}
}

func TestClassifyBuild(t *testing.T) {
	// go test -c's output: no "[build failed]" line, only the compiler's.
	for _, tc := range []struct {
		name, out string
		status    Status
		detail    string
	}{
		{"the mutated file", `# github.com/ensembletest/ensemble/operators/multigres
/tmp/ensemble-mutate-1/m3/names.go:12:15: invalid operation: operator - not defined on s (variable of type string)
`, NotViable, "operators/multigres/names.go:12:15: invalid operation: operator - not defined on s (variable of type string)"},
		{"another file", `# github.com/ensembletest/ensemble/fakes/dataplane
../fakes/dataplane/dataplane.go:22:2: "sigs.k8s.io/controller-runtime/pkg/client" imported and not used
/tmp/ensemble-mutate-1/m3/names.go:12:15: too many errors
`, NotViable, "operators/multigres/names.go:12:15: too many errors"},
		{"another file only", `# github.com/ensembletest/ensemble/fakes/dataplane
../fakes/dataplane/dataplane.go:22:2: "sigs.k8s.io/controller-runtime/pkg/client" imported and not used
`, Broken, "the build failed outside operators/multigres/names.go: ../fakes/dataplane/dataplane.go:22:2: \"sigs.k8s.io/controller-runtime/pkg/client\" imported and not used"},
	} {
		s, d := classifyBuild("operators/multigres/names.go", "/tmp/ensemble-mutate-1/m3/names.go", tc.out)
		if s != tc.status || d != tc.detail {
			t.Errorf("%s: got %s %q, want %s %q", tc.name, s, d, tc.status, tc.detail)
		}
	}
}

func TestReport(t *testing.T) {
	ms := []Mutant{
		{File: "operators/x/a.go", Line: 3, Col: 7, Kind: "CONDITIONALS_NEGATION", From: "==", To: "!=", Status: Killed,
			Specs: []string{"x a"}, Compile: 20 * time.Second, Run: 30 * time.Second},
		{File: "operators/x/a.go", Line: 4, Col: 9, Kind: "CONDITIONALS_BOUNDARY", From: "<", To: "<=", Status: Survived,
			Specs: []string{"x a", "x b", "x c"}, Compile: 25 * time.Second, Run: 90 * time.Second},
		{File: "operators/x/a.go", Line: 9, Col: 2, Kind: "INCREMENT_DECREMENT", From: "++", To: "--", Status: TimedOut,
			Specs: []string{"x a", "x b"}, Compile: 22 * time.Second, Run: 120 * time.Second},
		{File: "operators/x/a.go", Line: 12, Col: 5, Kind: "ARITHMETIC_BASE", From: "+", To: "-", Status: NotViable,
			Specs: []string{"x a"}, Compile: 5 * time.Second},
		{File: "operators/x/sub/b.go", Line: 5, Col: 1, Kind: "CONDITIONALS_NEGATION", From: "!=", To: "==", Status: NotCovered},
		{File: "operators/x/sub/b.go", Line: 6, Col: 1, Kind: "CONDITIONALS_NEGATION", From: "!=", To: "==", Status: NotRun},
		{File: "operators/x/sub/b.go", Line: 8, Col: 3, Kind: "CONDITIONALS_NEGATION", From: "==", To: "!=", Status: Broken, Detail: "the build failed outside operators/x/sub/b.go: c.go:1:1: x"},
	}
	var b bytes.Buffer
	report(&b, Header{Pkg: "operators/x", Suite: "./scenarios/", Labels: "x", Base: "HEAD~1", OutsideBase: 7, Specs: 3, Coverage: 65 * time.Second, Wall: 390 * time.Second}, ms)
	want := `
mutation score of ./scenarios/ (label filter "x") over operators/x, lines changed since HEAD~1
left out: 7 mutants on lines unchanged since HEAD~1
file     mutants killed timed out survived not covered not viable not run   score   covered
a.go           4      1         1        1           0          1       0   66.7%    100.0%
sub/b.go       3      0         0        0           1          0       1       -     50.0%
total          7      1         1        1           1          1       1   66.7%     80.0%
score: killed (timed out included) / (killed + survived); covered: mutants a spec runs / viable mutants
1 covered mutants not run (-max): the score is over an evenly spaced sample of 3
broken (1, in no column: the build failed in another file than the mutated one, so nothing is known of them):
  operators/x/sub/b.go:8:3 CONDITIONALS_NEGATION (== -> !=): the build failed outside operators/x/sub/b.go: c.go:1:1: x
survivors (1):
  operators/x/a.go:4:9 CONDITIONALS_BOUNDARY (< -> <=)
wall time: 6m30s, per-spec coverage of 3 specs 1m5s
per mutant, min/median/max: compile 5s/22s/25s (4 compiled); specs covering 1/2/3, run 30s/1m30s/2m0s, compile and run 50s/1m55s/2m22s (3 run)
`
	if b.String() != want {
		t.Errorf("report:\n%s\nwant:\n%s", b.String(), want)
	}
	p := progress(3, 12, Mutant{File: "operators/x/a.go", Line: 3, Col: 7, Kind: "CONDITIONALS_NEGATION", From: "==", To: "!=",
		Status: Killed, Specs: []string{"x y", "x z"}, Ran: 1, Compile: 18049 * time.Millisecond, Run: 21340 * time.Millisecond,
		Detail: "[FAIL] x [It] y"})
	if want := "[ 3/12] KILLED      operators/x/a.go:3:7 CONDITIONALS_NEGATION (== -> !=) 1/2 specs, compile 18s, run 21.3s  [FAIL] x [It] y"; p != want {
		t.Errorf("progress: %q, want %q", p, want)
	}
	if p := progress(1, 1, Mutant{Status: TimedOut, Specs: []string{"x y"}, Ran: -1}); !strings.Contains(p, " ?/1 specs") {
		t.Errorf("progress without a report: %q", p)
	}
}

func TestCheckRefusesBadInput(t *testing.T) {
	// The tests run in the package's directory: the module root is two levels up.
	t.Chdir("../..")
	ok := config{pkg: "operators/multigres", jobs: 1}
	for _, tc := range []struct {
		name string
		edit func(*config)
		want string
	}{
		{"a negative max", func(c *config) { c.max = -1 }, "-max (make's MAX) is -1: pass how many covered mutants to run, 1 or more, or 0 for all"},
		{"no job", func(c *config) { c.jobs = 0 }, "-j (make's MUTATE_JOBS) is 0"},
		{"a negative timeout", func(c *config) { c.timeout = -time.Second }, "-timeout is -1s"},
		{"a missing package", func(c *config) { c.pkg = "operators/nosuch" }, `-pkg (make's PKG) "operators/nosuch" is no package directory of the module (run from the module root): pass one of operators/matrixone`},
		{"a package outside", func(c *config) { c.pkg = "../ensemble/operators/multigres" }, "is no package directory of the module"},
		{"no package", func(c *config) { c.pkg = "" }, "pass -pkg (make's PKG) DIR, the package directory to mutate relative to the module root, such as "},
	} {
		c := ok
		tc.edit(&c)
		err := check(c)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: err = %v, want one line containing %q", tc.name, err, tc.want)
		}
	}
	if err := check(ok); err != nil {
		t.Errorf("check(%+v) = %v", ok, err)
	}
}

// Main's bad input is one line and exit 1, before gremlins or the suite runs; -h is the usage and exit 0.
func TestMainRefusesBadInputInOneLine(t *testing.T) {
	t.Chdir("../..")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{}, "mutate: pass -pkg (make's PKG) DIR, the package directory to mutate relative to the module root, such as "},
		{[]string{"-pkg", "operators/multigres", "-max", "x"}, `mutate: -max (make's MAX): invalid value "x": pass a whole number`},
		{[]string{"-pkg", "operators/multigres", "-list", "-suite", "docs"}, "mutate: -suite docs has no _test.go file"},
		{[]string{"-pkg", "operators/multigres", "-list", "-suite", "scenarios", "-gremlins", "/nonexistent/gremlins"}, "mutate: -gremlins /nonexistent/gremlins is no file: pass the gremlins v0.6.0 binary"},
	} {
		var out, errb bytes.Buffer
		code := Main(context.Background(), tc.args, &out, &errb)
		lines := strings.Split(strings.TrimSpace(errb.String()), "\n")
		if code != 1 || len(lines) != 1 || !strings.HasPrefix(lines[0], tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want exit 1 and one line starting %q", tc.args, code, errb.String(), tc.want)
		}
	}
	t.Chdir(t.TempDir())
	var out, errb bytes.Buffer
	if code := Main(context.Background(), []string{"-pkg", "x"}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "run from the module root, where go.mod is") {
		t.Errorf("outside a module: exit %d, stderr %q", code, errb.String())
	}
	errb.Reset()
	if code := Main(context.Background(), []string{"-h"}, &out, &errb); code != 0 || !strings.HasPrefix(errb.String(), "usage: "+Synopsis) {
		t.Errorf("-h: exit %d, stderr %q", code, errb.String())
	}
}

func TestDropOtherModulesLeavesOutNestedModules(t *testing.T) {
	t.Chdir(t.TempDir())
	for _, f := range []string{"go.mod", "a/a.go", "v2/go.mod", "v2/b/b.go", "v2/c.go"} {
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ms, dropped := dropOtherModules([]Mutant{{File: "a/a.go"}, {File: "v2/b/b.go"}, {File: "v2/c.go"}, {File: "top.go"}})
	if dropped != 2 || len(ms) != 2 || ms[0].File != "a/a.go" || ms[1].File != "top.go" {
		t.Errorf("dropOtherModules kept %+v, dropped %d", ms, dropped)
	}
}
