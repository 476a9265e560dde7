package main

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"
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

func TestCoverage(t *testing.T) {
	profile := `mode: set
example.com/m/operators/x/a.go:10.20,12.3 2 1
example.com/m/operators/x/a.go:14.2,14.30 1 0
example.com/m/operators/x/b.go:5.1,5.40 1 1
`
	cov, err := parseCoverage(strings.NewReader(profile), "example.com/m")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		file      string
		line, col int
		want      bool
	}{
		{"operators/x/a.go", 10, 20, true},
		{"operators/x/a.go", 10, 19, false}, // before the block on its first line
		{"operators/x/a.go", 11, 1, true},
		{"operators/x/a.go", 12, 3, true},
		{"operators/x/a.go", 12, 4, false},
		{"operators/x/a.go", 14, 10, false}, // a block that never ran
		{"operators/x/b.go", 5, 40, true},
		{"operators/x/c.go", 5, 10, false},
	} {
		if got := cov.Covers(tc.file, tc.line, tc.col); got != tc.want {
			t.Errorf("Covers(%s:%d:%d) = %v", tc.file, tc.line, tc.col, got)
		}
	}
	if _, err := parseCoverage(strings.NewReader("mode: set\nnot a profile line\n"), "m"); err == nil {
		t.Error("a malformed line was read")
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

func TestClassify(t *testing.T) {
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
	buildFailure := `# github.com/ensembletest/ensemble/operators/multigres
/tmp/ensemble-mutate-1/m3/names.go:12:15: invalid operation: operator - not defined on s (variable of type string)
FAIL	github.com/ensembletest/ensemble/scenarios [build failed]
FAIL
`
	otherFile := `# github.com/ensembletest/ensemble/fakes/dataplane
../fakes/dataplane/dataplane.go:22:2: "sigs.k8s.io/controller-runtime/pkg/client" imported and not used
FAIL	github.com/ensembletest/ensemble/scenarios [build failed]
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
		{"build failed", 1, false, buildFailure, NotViable, "operators/multigres/names.go:12:15: invalid operation: operator - not defined on s (variable of type string)"},
		{"build failed elsewhere", 1, false, otherFile, Broken, "the build failed outside operators/multigres/names.go: ../fakes/dataplane/dataplane.go:22:2: \"sigs.k8s.io/controller-runtime/pkg/client\" imported and not used"},
		{"go test -timeout", 1, false, "panic: test timed out after 2m0s\n", TimedOut, ""},
		{"killed at the deadline", -1, true, "", TimedOut, ""},
	} {
		s, d := classify("operators/multigres/names.go", "/tmp/ensemble-mutate-1/m3/names.go", tc.code, tc.deadline, tc.out)
		if s != tc.status || d != tc.detail {
			t.Errorf("%s: got %s %q, want %s %q", tc.name, s, d, tc.status, tc.detail)
		}
	}
}

func TestReport(t *testing.T) {
	ms := []Mutant{
		{File: "operators/x/a.go", Line: 3, Col: 7, Kind: "CONDITIONALS_NEGATION", From: "==", To: "!=", Status: Killed},
		{File: "operators/x/a.go", Line: 4, Col: 9, Kind: "CONDITIONALS_BOUNDARY", From: "<", To: "<=", Status: Survived},
		{File: "operators/x/a.go", Line: 9, Col: 2, Kind: "INCREMENT_DECREMENT", From: "++", To: "--", Status: TimedOut},
		{File: "operators/x/a.go", Line: 12, Col: 5, Kind: "ARITHMETIC_BASE", From: "+", To: "-", Status: NotViable},
		{File: "operators/x/sub/b.go", Line: 5, Col: 1, Kind: "CONDITIONALS_NEGATION", From: "!=", To: "==", Status: NotCovered},
		{File: "operators/x/sub/b.go", Line: 6, Col: 1, Kind: "CONDITIONALS_NEGATION", From: "!=", To: "==", Status: NotRun},
		{File: "operators/x/sub/b.go", Line: 8, Col: 3, Kind: "CONDITIONALS_NEGATION", From: "==", To: "!=", Status: Broken, Detail: "the build failed outside operators/x/sub/b.go: c.go:1:1: x"},
	}
	var b bytes.Buffer
	report(&b, Header{Pkg: "operators/x", Suite: "./scenarios/", Labels: "x", Base: "HEAD~1", OutsideBase: 7, Wall: 90 * time.Second}, ms)
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
wall time: 1m30s
`
	if b.String() != want {
		t.Errorf("report:\n%s\nwant:\n%s", b.String(), want)
	}
	p := progress(3, 12, Mutant{File: "operators/x/a.go", Line: 3, Col: 7, Kind: "CONDITIONALS_NEGATION", From: "==", To: "!=",
		Status: Killed, Took: 21340 * time.Millisecond, Detail: "[FAIL] x [It] y"})
	if want := "[ 3/12] KILLED      operators/x/a.go:3:7 CONDITIONALS_NEGATION (== -> !=) 21.3s  [FAIL] x [It] y"; p != want {
		t.Errorf("progress: %q, want %q", p, want)
	}
}
