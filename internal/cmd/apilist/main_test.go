package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestAPIListingIsReviewed: the library's exported API is the one docs/api.txt lists. A change that adds,
// removes or changes an exported name rewrites that file (go run ./internal/cmd/apilist -w), so the review
// sees the API change as a diff of its own.
func TestAPIListingIsReviewed(t *testing.T) {
	got, err := listing("../../..")
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join("../../..", golden))
	if err != nil {
		t.Fatalf("%v: write it with go run ./internal/cmd/apilist -w", err)
	}
	if d := cmp.Diff(strings.Split(string(want), "\n"), strings.Split(got, "\n")); d != "" {
		t.Fatalf("the exported API differs from %s (-reviewed +code); if the change is meant, run go run ./internal/cmd/apilist -w and commit the file:\n%s", golden, d)
	}
}

// TestListingShowsFieldsAndInterfaceMethods: the listing names what a count of top-level names missed.
func TestListingShowsFieldsAndInterfaceMethods(t *testing.T) {
	dir := t.TempDir()
	src := `package p
type S struct { A int; b string; C, D []string }
type I interface { M(x int) error; n() }
func (s *S) Do(ctx string) (int, error) { return 0, nil }
func (s *S) hidden() {}
const K S = 1
var V = 2
`
	if err := os.WriteFile(filepath.Join(dir, "p.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := exported(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"const K S = 1", "field S.A int", "field S.C []string", "field S.D []string", "method (*S) Do(ctx string) (int, error)",
		"method I.M(x int) error", "type I interface", "type S struct", "var V"}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("listing (-want +got):\n%s", d)
	}
}
