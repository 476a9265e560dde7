package mutate

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeGremlins plays gremlins' dry run: it copies the report $FAKE_GREMLINS_REPORT to --output.
const fakeGremlins = `#!/bin/sh
out=
while [ $# -gt 0 ]; do
  case "$1" in --output) out="$2"; shift ;; esac
  shift
done
cp "$FAKE_GREMLINS_REPORT" "$out"
`

// The whole command on a fake suite (testdata/calcsuite, a Ginkgo suite over testdata/calc that makes the
// next mutant active between runs as the harness does): the schema holds every mutant it can, compiled
// once; the runs of one spec share a process, and a run that kills its mutant (a failure, a panic in a
// goroutine that ends the process, a hang past -timeout) ends only that mutant, the runs after it judged
// in another process; a mutant evaluated while its package initialises runs alone in a process; a
// constant expression is compiled alone as before; a survivor passes every spec that covers it.
func TestMutateWithAFakeSuite(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles a suite and runs it")
	}
	const pkg, file = "internal/mutate/testdata/calc", "internal/mutate/testdata/calc/calc.go"
	t.Chdir("../..")
	dir := t.TempDir()
	assets := filepath.Join(dir, "assets")
	if err := os.MkdirAll(assets, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if err := os.WriteFile(filepath.Join(assets, b), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("KUBEBUILDER_ASSETS", assets)
	var rep gremlinsReport
	rep.Files = append(rep.Files, gremlinsFile{FileName: "calc.go"})
	for _, m := range enumerate(t, file, gremlinsDefaults) {
		rep.Files[0].Mutations = append(rep.Files[0].Mutations, gremlinsMutation{m.Kind, m.Line, m.Col})
	}
	b, _ := json.Marshal(rep)
	t.Setenv("FAKE_GREMLINS_REPORT", filepath.Join(dir, "gremlins.json"))
	if err := os.WriteFile(filepath.Join(dir, "gremlins.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	gr := filepath.Join(dir, "gremlins")
	if err := os.WriteFile(gr, []byte(fakeGremlins), 0o755); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	c := config{pkg: pkg, suite: filepath.Dir(pkg) + "/calcsuite", gremlins: gr, jobs: 2, timeout: 10 * time.Second}
	ms, err := run(context.Background(), c, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	src, _ := os.ReadFile(file)
	lines := strings.Split(string(src), "\n")
	type want struct {
		status Status
		detail string
		// alone: compiled alone (not a switch of the schema); solo: its process's only run.
		alone, solo bool
	}
	for _, tc := range []struct {
		code, op, kind string
		want           want
	}{
		{"base() + 1", "+", "ARITHMETIC_BASE", want{status: Killed, solo: true}},
		{"x < lo", "<", "CONDITIONALS_BOUNDARY", want{status: Survived}},
		{"x < lo", "<", "CONDITIONALS_NEGATION", want{status: Killed, detail: "calc clamps"}},
		{"i <= n", "<=", "CONDITIONALS_BOUNDARY", want{status: Killed, detail: "calc sums"}},
		{"i <= n", "<=", "CONDITIONALS_NEGATION", want{status: Killed, detail: "calc sums"}},
		{"i++", "++", "INCREMENT_DECREMENT", want{status: TimedOut}},
		{"len(xs) > 0", ">", "CONDITIONALS_BOUNDARY", want{status: Killed, detail: "panic: runtime error: index out of range"}},
		{"len(xs) > 0", ">", "CONDITIONALS_NEGATION", want{status: Killed, detail: "panic: runtime error: index out of range"}},
		{"2 * 3", "*", "ARITHMETIC_BASE", want{status: Killed, alone: true}},
		{"x * (2", "*", "ARITHMETIC_BASE", want{status: Killed, detail: "calc scales"}},
		{`"hi " + name`, "+", "ARITHMETIC_BASE", want{status: NotViable, detail: "calc.go"}},
		{"a == 3", "==", "CONDITIONALS_NEGATION", want{status: NotCovered}},
	} {
		found := false
		for _, m := range ms {
			l := lines[m.Line-1]
			if i := strings.Index(l, tc.code); m.Kind != tc.kind || i < 0 || i+strings.Index(tc.code, tc.op)+1 != m.Col {
				continue
			}
			found = true
			got := want{status: m.Status, alone: m.ID == 0 && m.Alone != "", solo: m.Solo}
			if tc.want.detail != "" && strings.Contains(m.Detail, tc.want.detail) {
				got.detail = tc.want.detail
			}
			if tc.want.status == NotViable || tc.want.status == NotCovered {
				got.alone = tc.want.alone
			}
			if got != tc.want {
				t.Errorf("%s %s %s: %+v (ID %d, alone %q, detail %q), want %+v", m.Pos(), m.Kind, tc.code, got, m.ID, m.Alone, m.Detail, tc.want)
			}
			if m.ID != 0 && m.Compile != 0 {
				t.Errorf("%s %s: a schema mutant compiled alone (%s)", m.Pos(), m.Kind, m.Compile)
			}
		}
		if !found {
			t.Errorf("no %s mutant of %q", tc.kind, tc.code)
		}
	}
	for _, s := range []string{"compiled alone: " + file, "a constant expression", "score", "survivors (1):", "mutant schema: "} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("the output does not say %q:\n%s", s, out.String())
		}
	}
	if t.Failed() || testing.Verbose() {
		t.Log(out.String())
	}
}
