package mutate

import (
	"context"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
)

// gremlinsDefaults are the mutator types gremlins v0.6.0 enables unless told otherwise.
var gremlinsDefaults = []string{"ARITHMETIC_BASE", "CONDITIONALS_BOUNDARY", "CONDITIONALS_NEGATION", "INCREMENT_DECREMENT", "INVERT_NEGATIVES"}

// enumerate lists the mutants gremlins' dry run would list in file (module-relative) with the given kinds
// enabled: a mutant of each kind whose replacements hold the operator token of an assignment, binary
// expression, branch, increment or decrement or unary expression (gremlins' NewTokenNode).
func enumerate(t *testing.T, file string, kinds []string) []Mutant {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var ms []Mutant
	ast.Inspect(f, func(n ast.Node) bool {
		var tok token.Token
		var pos token.Pos
		switch n := n.(type) {
		case *ast.AssignStmt:
			tok, pos = n.Tok, n.TokPos
		case *ast.BinaryExpr:
			tok, pos = n.Op, n.OpPos
		case *ast.BranchStmt:
			tok, pos = n.Tok, n.TokPos
		case *ast.IncDecStmt:
			tok, pos = n.Tok, n.TokPos
		case *ast.UnaryExpr:
			tok, pos = n.Op, n.OpPos
		default:
			return true
		}
		for _, k := range kinds {
			if _, ok := mutations[k][tok]; ok {
				p := fset.Position(pos)
				ms = append(ms, Mutant{File: file, Line: p.Line, Col: p.Column, Kind: k, Status: NotRun})
			}
		}
		return true
	})
	sortMutants(ms)
	return ms
}

// allKinds are every kind mutations knows.
func allKinds() []string {
	var out []string
	for k := range mutations {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// kindsFile is the fixture of every kind the schema rewrites.
const kindsFile = "internal/mutate/testdata/kinds/kinds.go"

// schemaOf builds the schema of every mutant of every kind in the kinds fixture, from the module root.
func schemaOf(t *testing.T) ([]Mutant, schemaResult, *program) {
	t.Helper()
	t.Chdir("../..")
	ms := enumerate(t, kindsFile, allKinds())
	p, err := loadProgram(context.Background(), filepath.Dir(kindsFile))
	if err != nil {
		t.Fatal(err)
	}
	todo := make([]int, len(ms))
	for i := range todo {
		todo[i] = i
	}
	res, err := buildSchema(p, ms, todo)
	if err != nil {
		t.Fatal(err)
	}
	return ms, res, p
}

// Each kind of position becomes its switch, and a position the schema cannot hold says why; the rewrite
// keeps every line where it was.
func TestSchemaRewritesEachKind(t *testing.T) {
	ms, res, _ := schemaOf(t)
	abs, _ := filepath.Abs(kindsFile)
	text := string(res.files[abs])
	orig, _ := os.ReadFile(kindsFile)
	if got, want := strings.Count(text, "\n"), strings.Count(string(orig), "\n"); got != want {
		t.Fatalf("the rewritten file has %d lines, the original %d:\n%s", got, want, text)
	}
	lines := strings.Split(text, "\n")
	origLines := strings.Split(string(orig), "\n")
	// find is the mutant of kind at the first position on the line holding code whose operator is op.
	find := func(code, op, kind string) Mutant {
		t.Helper()
		for _, m := range ms {
			l := origLines[m.Line-1]
			if m.Kind == kind && strings.Contains(l, code) && strings.HasPrefix(l[m.Col-1:], op) {
				return m
			}
		}
		t.Fatalf("no %s mutant of %q in %q", kind, op, code)
		return Mutant{}
	}
	for _, tc := range []struct {
		code, op, kind string
		// switch is what the rewritten line holds; alone a part of the reason it is compiled alone;
		// status a verdict made without a run.
		swtch, alone string
		status       Status
		solo         bool
	}{
		{code: `at("a", a) < at("b", b)`, op: "<", kind: "CONDITIONALS_BOUNDARY", swtch: `ensemblemutant.Ordered(at("a", a), at("b", b), ensemblemutant.LSS, ensemblemutant.Alt{ID: `},
		{code: `s <= "m"`, op: "<=", kind: "CONDITIONALS_NEGATION", swtch: `ensemblemutant.Ordered(s, "m", ensemblemutant.LEQ`},
		{code: `err == nil`, op: "==", kind: "CONDITIONALS_NEGATION", swtch: `ensemblemutant.Equal(err, nil, ensemblemutant.EQL`},
		// The constant 3 has the type int beside an interface, which Go would not infer one T from.
		{code: `v == 3`, op: "==", kind: "CONDITIONALS_NEGATION", swtch: `func() bool { if ensemblemutant.On(`},
		{code: `xs == nil`, op: "==", kind: "CONDITIONALS_NEGATION", swtch: `return xs != nil }; return xs == nil }()`},
		{code: `at("a", a) + at("b", b)`, op: "+", kind: "ARITHMETIC_BASE", swtch: `ensemblemutant.Arith(at("a", a), at("b", b), ensemblemutant.ADD`},
		{code: `a % 3`, op: "%", kind: "ARITHMETIC_BASE", swtch: `ensemblemutant.Int(a, 3, ensemblemutant.REM`},
		{code: `d * time.Second`, op: "*", kind: "ARITHMETIC_BASE", swtch: `ensemblemutant.Arith(d, time.Second, ensemblemutant.MUL`},
		{code: `-at("a", a)`, op: "-", kind: "INVERT_NEGATIVES", swtch: `ensemblemutant.Neg(at("a", a), `},
		{code: `i++`, op: "++", kind: "INCREMENT_DECREMENT", swtch: `; func() { if ensemblemutant.On(`},
		{code: `up++`, op: "++", kind: "INCREMENT_DECREMENT", swtch: `		if ensemblemutant.On(`},
		{code: `sum += i`, op: "+=", kind: "INVERT_ASSIGNMENTS", swtch: `{ sum -= i } else { sum += i }`},
		{code: `break`, op: "break", kind: "INVERT_LOOPCTRL", swtch: `{ continue } else { break }`},
		{code: `on("a", a) && on("b", b)`, op: "&&", kind: "INVERT_LOGICAL", swtch: `ensemblemutant.Logic(on("a", a), func() bool { return on("b", b) }, ensemblemutant.LAND`},
		{code: `at("scale", 3) + 1`, op: "+", kind: "ARITHMETIC_BASE", swtch: `ensemblemutant.Arith(at("scale", 3), 1, ensemblemutant.ADD`, solo: true},
		{code: `Twice = 2 * 3`, op: "*", kind: "ARITHMETIC_BASE", alone: "a constant expression"},
		{code: `Twice + a`, op: "+", kind: "ARITHMETIC_BASE", swtch: `ensemblemutant.Arith(Twice, a, `},
		{code: `1 << a`, op: "<<", kind: "INVERT_BITWISE", alone: "a shift"},
		{code: `recover() != "q"`, op: "!=", kind: "CONDITIONALS_NEGATION", alone: "recover"},
		{code: `"hi " + name`, op: "+", kind: "ARITHMETIC_BASE", status: NotViable},
	} {
		m := find(tc.code, tc.op, tc.kind)
		name := fmt.Sprintf("%s %s (%s)", tc.kind, tc.code, m.Pos())
		switch {
		case tc.status != "":
			if m.Status != tc.status || m.ID != 0 {
				t.Errorf("%s: %s, ID %d (%s), want %s", name, m.Status, m.ID, m.Detail, tc.status)
			}
		case tc.alone != "":
			if m.ID != 0 || !strings.Contains(m.Alone, tc.alone) {
				t.Errorf("%s: ID %d, compiled alone for %q, want alone for %q", name, m.ID, m.Alone, tc.alone)
			}
		default:
			if m.ID == 0 || m.Alone != "" {
				t.Errorf("%s: not in the schema: %s %s", name, m.Alone, m.Detail)
			} else if !strings.Contains(lines[m.Line-1], tc.swtch) || !strings.Contains(lines[m.Line-1], fmt.Sprintf("%d", m.ID)) {
				t.Errorf("%s: line %d is\n%s\nwant it to hold %s and the ID %d", name, m.Line, lines[m.Line-1], tc.swtch, m.ID)
			}
			if m.Solo != tc.solo {
				t.Errorf("%s: solo %t, want %t", name, m.Solo, tc.solo)
			}
		}
	}
	if !strings.Contains(text, "\npackage kinds; import ensemblemutant \""+mutantPath+"\"\n") {
		t.Errorf("the rewritten file does not import the switches on its package line:\n%s", text)
	}
}

// probe is a test the overlay adds to the kinds fixture: it calls every function and writes what each
// returned (or its panic) and the operands it evaluated, in order, as JSON to $PROBE_OUT.
const probe = `package kinds

import (
	"encoding/json"
	"fmt"
	"os"
	"testing"
)

func TestProbe(t *testing.T) {
	out := map[string]any{}
	call := func(name string, f func() any) {
		Log, ticks = nil, 0
		var v any
		func() {
			defer func() {
				if r := recover(); r != nil {
					v = fmt.Sprint("panic: ", r)
				}
			}()
			v = f()
		}()
		out[name] = map[string]any{"v": fmt.Sprint(v), "log": Log}
	}
	x := 5
	call("scale", func() any { return Scale })
	call("ordered", func() any { return Ordered(2, 3, 0.7, "k") })
	call("ordered equal", func() any { return Ordered(3, 3, 0.5, "m") })
	call("equal", func() any { return Equal(nil, &x, 3, nil) })
	call("unequal", func() any { return Equal(errBad, nil, "3", []int{}) })
	call("arith", func() any { return Arith(7, 2, 3, 2) })
	call("neg", func() any { return Neg(4, 1.5) })
	call("counts", func() any { return Counts(4) })
	call("branch", func() any { return Branch(5) })
	call("logic", func() any { return Logic(true, false) })
	call("logic reversed", func() any { return Logic(false, true) })
	call("shift", func() any { return Shift(3) })
	call("recovered", func() any { return Recovered() })
	call("greeting", func() any { return Greeting("x") })
	b, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(os.Getenv("PROBE_OUT"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}
`

// probeBinary compiles the kinds fixture's test with the probe and the files of replace (absolute path to
// text) overlaid, into dir/name.
func probeBinary(t *testing.T, dir, name string, replace map[string][]byte) string {
	t.Helper()
	abs, _ := filepath.Abs(filepath.Dir(kindsFile))
	ov := map[string]string{filepath.Join(abs, "probe_test.go"): filepath.Join(dir, name+"-probe_test.go")}
	if err := os.WriteFile(ov[filepath.Join(abs, "probe_test.go")], []byte(probe), 0o644); err != nil {
		t.Fatal(err)
	}
	for file, text := range replace {
		ov[file] = filepath.Join(dir, name+"-"+filepath.Base(file))
		if err := os.WriteFile(ov[file], text, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := json.Marshal(map[string]any{"Replace": ov})
	overlay := filepath.Join(dir, name+"-overlay.json")
	if err := os.WriteFile(overlay, b, 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, name+".test")
	if out, err := exec.Command("go", "test", "-c", "-o", bin, "-overlay="+overlay, "./"+filepath.Dir(kindsFile)).CombinedOutput(); err != nil {
		t.Fatalf("compiling the probe %s: %v\n%s", name, err, out)
	}
	return bin
}

// runProbe runs a probe binary with env and returns what it wrote.
func runProbe(t *testing.T, bin string, env ...string) string {
	t.Helper()
	outFile := bin + fmt.Sprintf("-%d.json", len(env))
	if len(env) > 0 {
		outFile = bin + "-" + strings.NewReplacer("=", "-", "|", "-").Replace(env[0]) + ".json"
	}
	cmd := exec.Command(bin, "-test.run=TestProbe")
	cmd.Env = append(os.Environ(), append(env, "PROBE_OUT="+outFile)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", bin, env, err, out)
	}
	b, err := os.ReadFile(outFile)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The schema's switch picks the right form: with no mutant active the rewritten package behaves as the
// original, and with each mutant active as that mutant compiled alone (its token replaced), operands
// evaluated as often and in the order they are there, whatever the position's kind. The schema itself
// compiles (the probe is built with it).
func TestSchemaMutantsBehaveAsTheMutantsCompiledAlone(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles the fixture once per mutant")
	}
	ms, res, _ := schemaOf(t)
	dir := t.TempDir()
	abs, _ := filepath.Abs(kindsFile)
	orig := runProbe(t, probeBinary(t, dir, "original", nil))
	schemaBin := probeBinary(t, dir, "schema", res.files)
	if got := runProbe(t, schemaBin); got != orig {
		t.Errorf("no mutant active: the schema's probe wrote\n%s\nthe original's\n%s", got, orig)
	}
	src, err := os.ReadFile(kindsFile)
	if err != nil {
		t.Fatal(err)
	}
	var schema []Mutant
	for _, m := range ms {
		if m.ID != 0 {
			schema = append(schema, m)
		}
	}
	if len(schema) < 20 {
		t.Fatalf("only %d mutants in the schema", len(schema))
	}
	var mu sync.Mutex
	var diffs []string
	differs := 0
	sem := make(chan struct{}, 2)
	var wg sync.WaitGroup
	for _, m := range schema {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			mutated, _, err := apply(src, m)
			if err != nil {
				t.Error(err)
				return
			}
			alone := runProbe(t, probeBinary(t, dir, fmt.Sprintf("m%d", m.ID), map[string][]byte{abs: mutated}))
			got := runProbe(t, schemaBin, fmt.Sprintf("ENSEMBLE_MUTANTS=%d", m.ID))
			mu.Lock()
			defer mu.Unlock()
			if got != alone {
				diffs = append(diffs, fmt.Sprintf("%s %s (%s -> %s): the schema's probe wrote\n%s\nthe mutant's alone\n%s", m.Pos(), m.Kind, m.From, m.To, got, alone))
			}
			if alone != orig {
				differs++
			}
		})
	}
	wg.Wait()
	slices.Sort(diffs)
	for _, d := range diffs {
		t.Error(d)
	}
	// The probe sees most mutants: a test that every mutant passes would prove nothing.
	if differs < len(schema)*2/3 {
		t.Errorf("only %d of %d mutants change what the probe writes", differs, len(schema))
	}
}

// A schema mutant whose switch does not type-check leaves the schema, to be compiled alone, and the other
// switches of its file stay.
func TestASwitchThatDoesNotTypeCheckIsCompiledAlone(t *testing.T) {
	t.Chdir("../..")
	ms := enumerate(t, kindsFile, gremlinsDefaults)
	p, err := loadProgram(context.Background(), filepath.Dir(kindsFile))
	if err != nil {
		t.Fatal(err)
	}
	src := p.files[kindsFile]
	todo := make([]int, len(ms))
	for i := range todo {
		todo[i] = i
	}
	// The first ordered comparison's switch is made an Arith on purpose, which takes no string.
	var victim ast.Node
	res, err := buildSchemaWith(p, ms, todo, func(s *site) {
		if victim == nil && s.helper == "Ordered" {
			victim, s.helper = s.node, "Arith"
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	var dropped, kept int
	for _, m := range ms {
		off := src.tf.Offset(src.tf.LineStart(m.Line)) + m.Col - 1
		switch n, _ := nodeAt(src, off); {
		case n == victim:
			if m.ID != 0 || !strings.Contains(m.Alone, "its switch does not type-check") {
				t.Errorf("%s %s: ID %d, alone %q: want it compiled alone, as its switch does not type-check", m.Pos(), m.Kind, m.ID, m.Alone)
			}
			dropped++
		case m.ID != 0:
			kept++
		}
	}
	if victim == nil || dropped == 0 || kept < 15 || res.sites == 0 {
		t.Errorf("%d dropped, %d kept, %d sites", dropped, kept, res.sites)
	}
	if strings.Contains(string(res.files[src.abs]), "ensemblemutant.Arith(at(\"a\", a), at(\"b\", b), ensemblemutant.LSS") {
		t.Errorf("the broken switch is still in the file:\n%s", res.files[src.abs])
	}
}
