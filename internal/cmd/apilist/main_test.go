package main

import "testing"

// suiteBudget is the most exported identifiers the suite package may have (funcs, types, methods,
// constants and variables): one vocabulary, small enough to learn in an afternoon. 65 held the harness
// before scripts, write matchers and oracles; those brought it to 83. Manager.Elected and External (the
// systems perturbation points take down or slow) brought it to 86; Case.Perturb, Case.Release and the
// Differential oracle and Case.AllowDifference to 90 (the point vocabulary itself lives in suite/perturb);
// Case.ArtifactsDir, for a test that fails a case on purpose and removes its dump, to 91.
const suiteBudget = 91

func TestSuiteStaysWithinItsBudget(t *testing.T) {
	ids, err := exported("../../../suite")
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) > suiteBudget {
		t.Fatalf("suite exports %d identifiers, over the budget of %d: make new ones Case methods or unexported (go run ./internal/cmd/apicount -v ./suite lists them)", len(ids), suiteBudget)
	}
	t.Logf("suite exports %d of %d", len(ids), suiteBudget)
}
