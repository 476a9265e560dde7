package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// Entry is one known bug of a public operator, as examples/bugs.yaml lists it.
type Entry struct {
	// Bug names it as "repository#number" (cluster-api#13649); Links are its issue and fix.
	Bug   string   `json:"bug"`
	Links []string `json:"links"`
	// Summary says in one line what goes wrong, in the operator's words.
	Summary string `json:"summary"`
	// Example is the directory under examples/ that runs the operator; Buggy and Fixed are the operator's
	// versions (a version other than the one the example's go.mod requires runs from the example's
	// directory <version>, as `make example EXAMPLES=<example>@<version>` runs it).
	Example string `json:"example"`
	Buggy   string `json:"buggy"`
	Fixed   string `json:"fixed"`
	// Spec is the full text of the ordinary spec that finds the bug (Ginkgo's containers and the spec,
	// joined by spaces, without the suite's description).
	Spec string `json:"spec"`
	// Explore, when set, finds the bug with make explore's budget over Spec; without it the spec finds
	// it unperturbed (an oracle or an assertion).
	Explore *Exploration `json:"explore,omitempty"`
	// Expect is a regular expression the failure at the buggy version must match (the oracle's name, the
	// check's words, the field that differs), so that a failure of another cause is not counted as finding
	// the bug.
	Expect string `json:"expect"`
	// FoundBy says in words what finds it (the oracle, or the check the failing point's run fails).
	FoundBy string `json:"foundBy"`
}

// Exploration is an entry's explore run: its modes (make explore's MODES) and budget (BUDGET, points or
// a duration). Entries with the same example, buggy version, spec and Exploration share one sweep, which
// stops once each entry's Expect has matched a failing point (explore's -until, once per entry), or at its
// budget. Batch is explore's -batch, the runs of points one test process makes (0: explore's default).
type Exploration struct {
	Modes  string `json:"modes"`
	Budget string `json:"budget"`
	Batch  int    `json:"batch,omitempty"`
}

// entryID matches an entry's Bug.
var entryID = regexp.MustCompile(`^[a-z0-9-]+#[0-9]+$`)

// readCatalog reads the catalog at path and checks every entry. Errors: an unreadable file, YAML that is
// not a list of entries (naming the field), an entry without its fields, an example directory that does not
// exist, a version the example cannot run (see suiteDir), two entries with one Bug, each naming the entry.
func readCatalog(path, examples string) ([]Entry, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var entries []Entry
	if err := yaml.UnmarshalStrict(b, &entries); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(entries) == 0 {
		return nil, fmt.Errorf("%s lists no bug", path)
	}
	var seen []string
	for _, e := range entries {
		if err := e.check(examples); err != nil {
			return nil, fmt.Errorf("%s: entry %q: %w", path, e.Bug, err)
		}
		if slices.Contains(seen, e.Bug) {
			return nil, fmt.Errorf("%s: entry %q is listed twice", path, e.Bug)
		}
		seen = append(seen, e.Bug)
	}
	return entries, nil
}

// check reports what is missing or wrong in e (see readCatalog).
func (e Entry) check(examples string) error {
	switch {
	case !entryID.MatchString(e.Bug):
		return errors.New("bug is not repository#number, such as cluster-api#13649")
	case len(e.Links) == 0:
		return errors.New("links name no issue or fix")
	case e.Summary == "" || e.Spec == "" || e.Expect == "" || e.FoundBy == "":
		return errors.New("summary, spec, expect and foundBy are all required")
	case e.Buggy == "" || e.Fixed == "" || e.Buggy == e.Fixed:
		return errors.New("buggy and fixed must be two versions")
	}
	if _, err := regexp.Compile(e.Expect); err != nil {
		return fmt.Errorf("expect %q is not a regular expression: %w", e.Expect, err)
	}
	if e.Explore != nil {
		if e.Explore.Modes == "" || e.Explore.Budget == "" {
			return errors.New("explore needs modes and budget")
		}
	}
	for _, v := range []string{e.Buggy, e.Fixed} {
		if _, err := suiteDir(filepath.Join(examples, e.Example), v); err != nil {
			return err
		}
	}
	return nil
}

// suiteDir is the directory that runs the example in dir at version: dir itself for the version its go.mod
// requires, dir/<version> for another (a module of its own whose go.mod requires that version, its files
// the example's, as `make example EXAMPLES=<example>@<version>` runs it). Errors: no such example, or a
// version neither go.mod nor a version directory gives (naming the versions there are).
func suiteDir(dir, version string) (string, error) {
	gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return "", fmt.Errorf("no example at %s (its go.mod: %w)", dir, err)
	}
	if _, err := os.Stat(filepath.Join(dir, version, "go.mod")); err == nil {
		return filepath.Join(dir, version), nil
	}
	if regexp.MustCompile(`(?m)^\s*\S+ ` + regexp.QuoteMeta(version) + `(\s|$)`).Match(gomod) {
		return dir, nil
	}
	others, _ := filepath.Glob(filepath.Join(dir, "*", "go.mod"))
	for i, o := range others {
		others[i] = filepath.Base(filepath.Dir(o))
	}
	return "", fmt.Errorf("%s runs no version %s: its go.mod requires another, and there is no %s/go.mod (there are: %s)",
		dir, version, version, strings.Join(append([]string{"go.mod's"}, others...), ", "))
}

// Row is what one entry came to: the table's row.
type Row struct {
	Bug, Operator, Buggy, Fixed, FoundBy string
	// Found says the buggy version failed as Expect says; Failure is its failure's first line (or why it
	// was not found).
	Found   bool
	Failure string
	// Point is the explore point that found it (empty for a spec that finds it unperturbed); Tried is how
	// many points explore ran to find it, the point's place in the sweep from 1 (all the sweep's points when
	// not found; 0 without explore), and TimeToFind the wall time from the start of the buggy run to the
	// finding (with explore, to that point's verdict), compile and unperturbed runs included: a row that
	// shares its run with others (see Exploration) has its own.
	Point      string `json:",omitempty"`
	Tried      int
	TimeToFind Duration
	// Others are the points of the sweep that failed as no entry sharing it expects, as "point: failure":
	// findings of their own.
	Others []string `json:",omitempty"`
	// AtFixed is the verdict of the same check at the fixed version: pass, fail (a false positive, or a
	// fix that does not hold), or not run (nothing was found).
	AtFixed        string
	AtFixedFailure string `json:",omitempty"`
	// Command reruns the row.
	Command string
}

// Duration is a time.Duration that JSON writes as a string such as "1m2s".
type Duration time.Duration

// MarshalText writes the duration rounded to a second.
func (d Duration) MarshalText() ([]byte, error) {
	return []byte(time.Duration(d).Round(time.Second).String()), nil
}

// UnmarshalText reads a duration as explore.json writes one ("1m2.3s"). Errors: time.ParseDuration's.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	*d = Duration(v)
	return err
}
