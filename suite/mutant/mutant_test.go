package mutant

import (
	"errors"
	"reflect"
	"testing"
)

func TestParse(t *testing.T) {
	for s, want := range map[string][]int{"": nil, "7": {7}, "12|7|30": {12, 7, 30}, " 3 | 4": {3, 4}} {
		got, err := Parse(s)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("Parse(%q) = %v, %v, want %v", s, got, err, want)
		}
	}
	for _, s := range []string{"0", "x", "3||4", "-1", "|"} {
		if got, err := Parse(s); err == nil {
			t.Errorf("Parse(%q) = %v, want an error", s, got)
		}
	}
}

// A marker reads back as written, after whatever output came before it on its line.
func TestMarkers(t *testing.T) {
	for _, m := range []Marker{
		{Spec: `pool "scales" (2 -> 3)`, Run: 3, Kind: Begins, Mutant: 17},
		{Run: 1, Kind: Begins, Mutant: 4},
		{Spec: "pool scales", Run: 3, Kind: Ended, Why: "failed"},
		{Spec: "pool scales", Run: 2, Kind: Unjudged, Why: "run 1 left Pod/p in namespace ns"},
		{Spec: "pool scales", Run: 1, Kind: FailedAfter, Why: "stopping manager op: timeout"},
	} {
		for _, prefix := range []string{"", "•••"} {
			got, ok := ParseMarker(prefix + m.String())
			if !ok || got != m {
				t.Errorf("ParseMarker(%q) = %+v, %t, want %+v", prefix+m.String(), got, ok, m)
			}
		}
	}
	for _, l := range []string{`ensemble mutant: run x of "s" begins (mutant 1)`, `ensemble mutant: run 2 of "s" ends`, "PASS",
		`ensemble mutant: run 2 of "s" begins`, `ensemble mutant: run 2 of s begins (mutant 1)`} {
		if m, ok := ParseMarker(l); ok {
			t.Errorf("ParseMarker(%q) = %+v", l, m)
		}
	}
}

// Each switch applies its own operator with no mutant or another mutant active, and its alt's operator
// while that alt's mutant is.
func TestSwitchesPickTheActiveMutantsOperator(t *testing.T) {
	defer Activate(0)
	alts := []Alt{{ID: 4, Op: LEQ}, {ID: 5, Op: GEQ}}
	for active, want := range map[int][3]bool{0: {true, false, false}, 9: {true, false, false}, 4: {true, true, false}, 5: {false, true, true}} {
		Activate(active)
		got := [3]bool{Ordered(1, 2, LSS, alts...), Ordered(2, 2, LSS, alts...), Ordered("b", "a", LSS, alts...)}
		if got != want {
			t.Errorf("mutant %d active: %v, want %v", active, got, want)
		}
	}
	Activate(6)
	var err error
	if Equal(err, nil, EQL, Alt{ID: 6, Op: NEQ}) || !Equal(err, nil, EQL, Alt{ID: 7, Op: NEQ}) {
		t.Error("Equal does not apply mutant 6's != (and only its)")
	}
	if Arith(7, 2, ADD, Alt{ID: 6, Op: SUB}) != 5 || Arith(7.0, 2, QUO) != 3.5 || Int(7, 3, REM, Alt{ID: 6, Op: MUL}) != 21 ||
		Int(6, 3, AND, Alt{ID: 1, Op: OR}) != 2 || Neg(3, 5, 6) != 3 || Neg(3, 5) != -3 {
		t.Error("an arithmetic switch does not apply the active mutant's operator")
	}
	called := false
	if !Logic(true, func() bool { called = true; return false }, LAND, Alt{ID: 6, Op: LOR}) || called {
		t.Errorf("Logic under mutant 6 (||) called its right operand (%t) or returned false", called)
	}
	if On(5) || !On(6) || Active() != 6 {
		t.Errorf("On(5) %t, On(6) %t, Active %d with mutant 6 active", On(5), On(6), Active())
	}
}

// Begin activates its run's mutant from Env, none for a mutant whose run failed in the process; without
// Env it does nothing.
func TestBegin(t *testing.T) {
	defer Activate(0)
	t.Setenv(Env, "")
	if err := Begin("s", 2); err != nil || Active() != 0 {
		t.Errorf("Begin without %s: %v, active %d", Env, err, Active())
	}
	t.Setenv(Env, "8|9|10")
	if err := Begin("s", 2); err != nil || Active() != 9 {
		t.Errorf("Begin(2) of 8|9|10: %v, active %d, want 9", err, Active())
	}
	if err := Begin("s", 4); err == nil {
		t.Error("Begin(4) of three runs: no error")
	}
	if err := End("s", 2, true); err != nil {
		t.Errorf("End of a failed run: %v", err)
	}
	if err := End("s", 3, false); err != nil {
		t.Errorf("End of a passed run without %s: %v", RetryEnv, err)
	}
	if err := Begin("t", 2); err != nil || Active() != 0 {
		t.Errorf("Begin(2) of another spec after mutant 9 failed: %v, active %d, want 0", err, Active())
	}
	if err := Begin("t", 3); err != nil || Active() != 10 {
		t.Errorf("Begin(3) after mutant 10 passed: %v, active %d, want 10", err, Active())
	}
	if !Began() {
		t.Error("Began is false after Begin")
	}
	// Under RetryEnv a run that passed fails on purpose, and a run of a mutant that failed fails at once.
	t.Setenv(RetryEnv, "1")
	if err := End("t", 3, false); !errors.Is(err, ErrPassed) {
		t.Errorf("End of a passed run under %s: %v, want ErrPassed", RetryEnv, err)
	}
	if !Done("u", 2) || Done("u", 3) {
		t.Errorf("Done: run 2 (mutant 9, failed) %t, run 3 (mutant 10, passed) %t; want true, false", Done("u", 2), Done("u", 3))
	}
}

// A run SkipEnv skips is done at once, as a run of a mutant that failed, under RetryEnv only; the others
// run. A SkipEnv that is no JSON object of runs from 1 does not parse.
func TestSkip(t *testing.T) {
	t.Setenv(Env, "3|4|5")
	t.Setenv(SkipEnv, `{"pool scales": [1, 3]}`)
	if Done("pool scales", 1) {
		t.Errorf("Done of a skipped run without %s", RetryEnv)
	}
	t.Setenv(RetryEnv, "1")
	for run, want := range map[int]bool{1: true, 2: false, 3: true} {
		if got := Done("pool scales", run); got != want {
			t.Errorf("Done(pool scales, %d) = %t, want %t", run, got, want)
		}
	}
	if Done("pool drains", 1) {
		t.Error("Done of a run of a spec SkipEnv does not name")
	}
	for _, s := range []string{`[1]`, `{"s": [0]}`, `{"s": "1"}`, `x`} {
		if got, err := ParseSkip(s); err == nil {
			t.Errorf("ParseSkip(%q) = %v, want an error", s, got)
		}
	}
}
