// Package mutant holds the switches of ensemble mutate's mutant schema: the one copy of the mutated
// package's code that ensemble mutate compiles has each mutated position rewritten to a call of this
// package that applies the original operator, or a mutant's, by which mutant is active. One test binary
// then judges many mutants, one run of a spec each, on one control plane (docs/architecture.md §10).
//
// The active mutant is a process-wide number, 0 for none. The test process reads Env, the mutant of each
// run of a spec in the process, at its start (the first run's is active from this package's init, so the
// mutated package's own initialisation sees it), and the harness makes the next one active between runs
// (Begin), once the previous run's manager instances have stopped and before the fresh ones start. Each
// run's beginning and end are lines on stderr (Marker), from which ensemble mutate knows which run of which
// spec a process that hung or died was in.
//
// The package imports the standard library only: code that ensemble mutate rewrites imports it through its
// module's require of ensemble, and production code never does.
package mutant

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Env names the variable ensemble mutate sets on a test process: the mutant of each run of a spec, in
// run order, as decimal IDs separated by "|" ("12|7|30": three runs). An ID is 1 or more. Every spec the
// process runs gets these runs.
const Env = "ENSEMBLE_MUTANTS"

// RetryEnv names the variable ensemble mutate sets (to 1) beside Env when the process's runs are Ginkgo's
// flake attempts (-ginkgo.flake-attempts), which repeat a spec while it fails; without it they are
// MustPassRepeatedly's, which repeat a spec while it passes (suite.Runs). Under it every run goes on to
// the next: the harness fails a run that passed on purpose (End's ErrPassed), and a run whose mutant
// already failed in the process at once (Done, ErrDone), so that the next run's mutant runs.
const RetryEnv = "ENSEMBLE_MUTANTS_RETRY"

// ErrPassed is the failure the harness gives a run that passed under RetryEnv, so that Ginkgo's flake
// attempts go on to the next run: ensemble mutate reads a run that failed with it as passed.
var ErrPassed = errors.New("ensemble mutant: the run passed, and fails on purpose so that the next run's mutant runs")

// SkipEnv names the variable ensemble mutate may set beside Env: the runs each spec skips, as a JSON object
// from a spec's full text to its runs (from 1), such as {"pool scales": [2, 3]}. A process runs the mutants
// of several sets of covering specs, every spec the union's: a run of a spec that does not cover its
// mutant's position would pass as the unmutated run does, so it fails at once (Done, ErrDone) instead.
const SkipEnv = "ENSEMBLE_MUTANTS_SKIP"

// ErrDone is the failure the harness gives a run under RetryEnv that has nothing to judge, at once, without
// running the spec: its mutant already failed in the process (ensemble mutate has judged it), or SkipEnv
// skips it (the spec does not cover its mutant).
var ErrDone = errors.New("ensemble mutant: the run's mutant failed in an earlier run of this process or is not covered by this spec: not run, and fails on purpose so that the next run's mutant runs")

// active is the mutant the switches apply now; 0 applies none.
var active atomic.Int64

var (
	mu sync.Mutex
	// began says a run of a spec has begun in this process (Mark or Begin); failed are the mutants whose
	// runs failed in it (End).
	began  bool
	failed = map[int]bool{}
)

func init() {
	if runs, err := Runs(); err == nil && len(runs) > 0 {
		Activate(runs[0])
		Note(Marker{Run: 1, Kind: Begins, Mutant: runs[0]})
	}
}

// Parse reads a value of Env: nil for "". Errors: an ID that is no decimal number of 1 or more.
func Parse(s string) ([]int, error) {
	if s == "" {
		return nil, nil
	}
	var out []int
	for i, f := range strings.Split(s, "|") {
		id, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || id < 1 {
			return nil, fmt.Errorf("%s: run %d's mutant %q is no ID (a decimal number of 1 or more)", Env, i+1, f)
		}
		out = append(out, id)
	}
	return out, nil
}

// ParseSkip reads a value of SkipEnv: each spec's skipped runs as a set (nil for ""). Errors: text that is
// no JSON object of arrays of runs, or a run below 1.
func ParseSkip(s string) (map[string]map[int]bool, error) {
	if s == "" {
		return nil, nil
	}
	var raw map[string][]int
	if err := json.Unmarshal([]byte(s), &raw); err != nil {
		return nil, fmt.Errorf(`%s: %v: give a JSON object from each spec's full text to the runs it skips, such as {"pool scales": [2, 3]}, or leave it unset`, SkipEnv, err)
	}
	out := map[string]map[int]bool{}
	for spec, runs := range raw {
		out[spec] = map[int]bool{}
		for _, r := range runs {
			if r < 1 {
				return nil, fmt.Errorf("%s: spec %q skips run %d: runs count from 1, give 1 or more", SkipEnv, spec, r)
			}
			out[spec][r] = true
		}
	}
	return out, nil
}

// Runs are the mutant IDs of Env, one a run (nil without it). Errors: Parse's.
func Runs() ([]int, error) {
	return Parse(os.Getenv(Env))
}

// Retrying says the runs are flake attempts (RetryEnv is set).
func Retrying() bool { return os.Getenv(RetryEnv) != "" }

// Active is the mutant the switches apply now, 0 for none.
func Active() int { return int(active.Load()) }

// On reports whether mutant id is the active one.
func On(id int) bool { return int(active.Load()) == id }

// Activate makes id the active mutant (0: none).
func Activate(id int) { active.Store(int64(id)) }

// Began says a run of a spec has begun in this process (Mark or Begin): every run after the first makes
// its mutant active, once the run before it has stopped its manager instances.
func Began() bool {
	mu.Lock()
	defer mu.Unlock()
	return began
}

// Mark writes the Marker of run (from 1) of spec beginning under the mutant already active: the process's
// first run, whose mutant init made active. Without Env it does nothing.
func Mark(spec string, run int) {
	mu.Lock()
	began = true
	mu.Unlock()
	if os.Getenv(Env) != "" {
		Note(Marker{Spec: spec, Run: run, Kind: Begins, Mutant: Active()})
	}
}

// Begin makes the mutant of run (from 1) of spec active and writes a Marker saying so to stderr, where
// ensemble mutate reads which run the process is in. A mutant whose run failed earlier in the process
// (End) is not made active again: its run applies none, so that it passes and the spec goes on to the runs
// after it (ensemble mutate has already judged that mutant; under RetryEnv the harness asks Done first). Without Env it does nothing. Errors: Env does
// not parse, or gives fewer runs.
func Begin(spec string, run int) error {
	runs, err := Runs()
	switch {
	case err != nil:
		return err
	case runs == nil:
		return nil
	case run < 1 || run > len(runs):
		return fmt.Errorf("%s gives %d runs, and run %d is beginning", Env, len(runs), run)
	}
	id := runs[run-1]
	mu.Lock()
	began = true
	if failed[id] {
		id = 0
	}
	mu.Unlock()
	Activate(id)
	Note(Marker{Spec: spec, Run: run, Kind: Begins, Mutant: id})
	return nil
}

// Done says run (from 1) of spec is to fail at once with ErrDone, under RetryEnv: its mutant failed in an
// earlier run of the process, or SkipEnv skips it. It writes the run's Marker (mutant 0: none ran) when so.
// A SkipEnv that does not parse never reaches it: the harness's Boot refuses it with ParseSkip's error, as
// it refuses an Env that does not parse, before any run begins.
func Done(spec string, run int) bool {
	runs, err := Runs()
	if err != nil || !Retrying() || run < 1 || run > len(runs) {
		return false
	}
	skip, err := ParseSkip(os.Getenv(SkipEnv))
	if err != nil {
		return false // Boot refused it
	}
	mu.Lock()
	done := failed[runs[run-1]] || skip[spec][run]
	mu.Unlock()
	if done {
		Note(Marker{Spec: spec, Run: run, Kind: Begins})
	}
	return done
}

// End records the end of run (from 1) of spec, after its cleanup, and whether it failed, and writes its
// Marker. Under RetryEnv it returns ErrPassed for a run that passed: the harness fails the run with it.
// Without Env it does nothing.
func End(spec string, run int, runFailed bool) error {
	runs, err := Runs()
	if err != nil || run < 1 || run > len(runs) {
		return nil
	}
	verdict := "passed"
	if runFailed {
		verdict = "failed"
		mu.Lock()
		failed[runs[run-1]] = true
		mu.Unlock()
	}
	Note(Marker{Spec: spec, Run: run, Kind: Ended, Why: verdict})
	if !runFailed && Retrying() {
		return ErrPassed
	}
	return nil
}

// Note writes m to stderr on a line of its own, when Env is set.
func Note(m Marker) {
	if os.Getenv(Env) != "" {
		fmt.Fprintf(os.Stderr, "\n%s\n", m)
	}
}

// MarkerKind is what a Marker says of its run.
type MarkerKind string

const (
	// Begins: the run's mutant is active (Mutant; 0 for a mutant whose run failed earlier in the process,
	// whose run under RetryEnv fails at once) and its spec is about to run.
	Begins MarkerKind = "begins"
	// Ended: the run's case was cleaned up; Why is "passed" or "failed".
	Ended MarkerKind = "ended"
	// Unjudged: the run could not begin for a reason that is not its mutant's (the run before it left
	// something behind); ensemble mutate runs that mutant again in another process.
	Unjudged MarkerKind = "unjudged"
	// FailedAfter: the run's spec passed, and then its manager instances did not stop (found as the next
	// run began): the run failed, as a single run's process fails at the suite's stop.
	FailedAfter MarkerKind = "failed after its spec"
)

// Marker is a line the test process writes for ensemble mutate about one run of a spec.
type Marker struct {
	// Spec is the spec's full text ("" in the line init writes, before any spec); Run the run, from 1;
	// Mutant the mutant made active (Begins).
	Spec        string
	Run, Mutant int
	Kind        MarkerKind
	// Why is the verdict of Ended and the reason of Unjudged and FailedAfter, on one line.
	Why string
}

// markerPrefix starts every marker line.
const markerPrefix = "ensemble mutant: run "

// String is the marker's line: `ensemble mutant: run 3 of "spec" begins (mutant 17)`, `ensemble mutant:
// run 3 of "spec" ended: passed`, `ensemble mutant: run 3 of "spec" unjudged: why`, `ensemble mutant: run
// 2 of "spec" failed after its spec: why`.
func (m Marker) String() string {
	head := fmt.Sprintf("%s%d of %s %s", markerPrefix, m.Run, strconv.Quote(m.Spec), m.Kind)
	if m.Kind == Begins {
		return fmt.Sprintf("%s (mutant %d)", head, m.Mutant)
	}
	return head + ": " + strings.Join(strings.Fields(m.Why), " ")
}

// ParseMarker finds a marker in line (other output may precede it on the line, as Ginkgo's progress marks
// do); ok is false when the line holds none.
func ParseMarker(line string) (m Marker, ok bool) {
	i := strings.Index(line, markerPrefix)
	if i < 0 {
		return m, false
	}
	rest := line[i+len(markerPrefix):]
	n, rest, _ := strings.Cut(rest, " of ")
	run, err := strconv.Atoi(n)
	if err != nil {
		return m, false
	}
	quoted, err := strconv.QuotedPrefix(rest)
	if err != nil {
		return m, false
	}
	m.Run = run
	if m.Spec, err = strconv.Unquote(quoted); err != nil {
		return Marker{}, false
	}
	rest = strings.TrimPrefix(rest[len(quoted):], " ")
	for _, k := range []MarkerKind{Begins, Ended, Unjudged, FailedAfter} {
		after, found := strings.CutPrefix(rest, string(k))
		if !found {
			continue
		}
		m.Kind = k
		if k == Begins {
			_, err := fmt.Sscanf(after, " (mutant %d)", &m.Mutant)
			return m, err == nil
		}
		why, found := strings.CutPrefix(after, ": ")
		m.Why = why
		return m, found
	}
	return Marker{}, false
}

// Op is a Go operator a switch applies.
type Op uint8

// The operators, named as go/token names their tokens.
const (
	EQL    Op = iota + 1 // ==
	NEQ                  // !=
	LSS                  // <
	LEQ                  // <=
	GTR                  // >
	GEQ                  // >=
	ADD                  // +
	SUB                  // -
	MUL                  // *
	QUO                  // /
	REM                  // %
	AND                  // &
	OR                   // |
	XOR                  // ^
	ANDNOT               // &^
	LAND                 // &&
	LOR                  // ||
)

var opText = [...]string{EQL: "==", NEQ: "!=", LSS: "<", LEQ: "<=", GTR: ">", GEQ: ">=", ADD: "+", SUB: "-", MUL: "*", QUO: "/",
	REM: "%", AND: "&", OR: "|", XOR: "^", ANDNOT: "&^", LAND: "&&", LOR: "||"}

// String is the operator as Go writes it.
func (o Op) String() string {
	if int(o) < len(opText) && opText[o] != "" {
		return opText[o]
	}
	return "Op(" + strconv.Itoa(int(o)) + ")"
}

// Alt is one mutant of a switch: while mutant ID is active, the switch applies Op instead of its own.
type Alt struct {
	ID int
	Op Op
}

// pick is the operator to apply: the active mutant's among alts, else op.
func pick(op Op, alts []Alt) Op {
	if a := Active(); a != 0 {
		for _, x := range alts {
			if x.ID == a {
				return x.Op
			}
		}
	}
	return op
}

// Number is the type set of the arithmetic switches.
type Number interface {
	~int | ~int8 | ~int16 | ~int32 | ~int64 | ~uint | ~uint8 | ~uint16 | ~uint32 | ~uint64 | ~uintptr |
		~float32 | ~float64 | ~complex64 | ~complex128
}

// Integer is the type set of the switches whose operators include % and the bitwise ones.
type Integer interface {
	~int | ~int8 | ~int16 | ~int32 | ~int64 | ~uint | ~uint8 | ~uint16 | ~uint32 | ~uint64 | ~uintptr
}

// Ordered is a op b, or the active alt's operator, for ordered operands: a comparison (==, !=, <, <=, >,
// >=). Both operands are evaluated once, as arguments, in the original expression's order. It panics on
// another operator, which a rewrite never passes.
func Ordered[T cmp.Ordered](a, b T, op Op, alts ...Alt) bool {
	switch pick(op, alts) {
	case EQL:
		return a == b
	case NEQ:
		return a != b
	case LSS:
		return a < b
	case LEQ:
		return a <= b
	case GTR:
		return a > b
	case GEQ:
		return a >= b
	}
	panic("mutant.Ordered: " + pick(op, alts).String() + " is no comparison")
}

// Equal is a op b, or the active alt's operator, for comparable operands: == or !=. It panics on another
// operator.
func Equal[T comparable](a, b T, op Op, alts ...Alt) bool {
	switch pick(op, alts) {
	case EQL:
		return a == b
	case NEQ:
		return a != b
	}
	panic("mutant.Equal: " + pick(op, alts).String() + " is neither == nor !=")
}

// Arith is a op b, or the active alt's operator: +, -, * or /. It panics on another operator.
func Arith[T Number](a, b T, op Op, alts ...Alt) T {
	switch pick(op, alts) {
	case ADD:
		return a + b
	case SUB:
		return a - b
	case MUL:
		return a * b
	case QUO:
		return a / b
	}
	panic("mutant.Arith: " + pick(op, alts).String() + " is no arithmetic operator of every number")
}

// Int is a op b, or the active alt's operator, for integers: +, -, *, /, %, &, |, ^ or &^. It panics on
// another operator (as Arith).
func Int[T Integer](a, b T, op Op, alts ...Alt) T {
	switch o := pick(op, alts); o {
	case REM:
		return a % b
	case AND:
		return a & b
	case OR:
		return a | b
	case XOR:
		return a ^ b
	case ANDNOT:
		return a &^ b
	default:
		return Arith(a, b, o)
	}
}

// Logic is a op b() for op && or ||, or the active alt's operator, with Go's short-circuit: b is called
// only when a does not decide. It panics on another operator.
func Logic(a bool, b func() bool, op Op, alts ...Alt) bool {
	switch pick(op, alts) {
	case LAND:
		return a && b()
	case LOR:
		return a || b()
	}
	panic("mutant.Logic: " + pick(op, alts).String() + " is neither && nor ||")
}

// Neg is -x, or +x while one of the mutants ids is active (gremlins' INVERT_NEGATIVES, and its
// ARITHMETIC_BASE on a unary minus, which replace the same token).
func Neg[T Number](x T, ids ...int) T {
	if a := Active(); a != 0 {
		for _, id := range ids {
			if id == a {
				return +x
			}
		}
	}
	return -x
}
