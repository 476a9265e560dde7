package suite

import (
	"fmt"
	"os"
	"testing"
)

// TestMain gives the package's tests an artifacts directory of their own when ENSEMBLE_ARTIFACTS is unset.
// Many of them fail a case on purpose to read the harness's verdict, and each such case writes a failure
// dump: a passing run removes them all, a failing one keeps them and names the directory last.
func TestMain(m *testing.M) {
	if os.Getenv("ENSEMBLE_ARTIFACTS") != "" {
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "ensemble-suite-test-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "suite tests: an artifacts directory: %v: point TMPDIR at a writable directory\n", err)
		os.Exit(1)
	}
	os.Setenv("ENSEMBLE_ARTIFACTS", dir)
	code := m.Run()
	if code == 0 {
		_ = os.RemoveAll(dir)
	} else {
		fmt.Fprintf(os.Stderr, "suite tests: failure dumps and timelines kept in %s\n", dir)
	}
	os.Exit(code)
}
