// Package pins is ensemble's defect catalog (docs/architecture.md §8): every defect the reference operators reproduce
// on purpose, as data. Each defect is a switch in its operator's Options, live or fixed; the catalog holds
// its default, the incident it comes from, the spec that pins or asserts it, and what retires it.
//
// A live defect is pinned with suite.KnownDefect (the pin passes while the defect is present and fails the
// day it is fixed); a fixed one is a positive assertion. ENSEMBLE_DEFECTS flips defaults for one run:
//
//	ENSEMBLE_DEFECTS=MG-CONDITION-MAP-ORDER=fixed,MO-CLAIM-DOUBLE-BIND=live make test-suite
package pins

import (
	"fmt"
	"os"
	"sort"
	"strings"
)

// State is a defect's switch position: Live runs the defective code path, Fixed the corrected one.
type State string

// The two states of a defect switch.
const (
	Live  State = "live"
	Fixed State = "fixed"
)

// Defect is one catalog entry.
type Defect struct {
	// ID is the stable reference, e.g. "MG-CONDITION-MAP-ORDER": the Options key and the KnownDefect ref.
	ID string
	// Title says what goes wrong, in one line.
	Title string
	// Source is the real incident the defect reproduces.
	Source string
	// Default is the state a run uses unless ENSEMBLE_DEFECTS overrides it.
	Default State
	// Specs names the scenario spec(s) that pin (live) or assert (fixed) the defect: a spec's full text (its
	// containers' texts and its own, joined by spaces), or "AfterSuite: <what it checks>" for the suite's
	// AfterSuite node. `make defect-matrix` flips the defect and checks that one of them changes verdict.
	Specs []string
	// Retire says when the entry leaves the catalog.
	Retire string
	// OwnInstanceLive says the entry's pin runs an operator instance of its own, scoped to its case's
	// namespace, that gives the defect the state opposite to the run's: live while the run's is fixed. The
	// suite's shared managers keep the run's state, so with a Default of fixed no other spec meets the defect
	// while the pin still holds it live. ENSEMBLE_DEFECTS flips both (see PinState).
	OwnInstanceLive bool
}

// Catalog is the list of defects; it implements suite.PinCatalog.
type Catalog []Defect

// Lookup returns the title of the defect with the given ID, and false when the catalog has no such ID.
func (c Catalog) Lookup(id string) (string, bool) {
	for _, d := range c {
		if d.ID == id {
			return d.Title, true
		}
	}
	return "", false
}

// Get returns the defect with the given ID, and false when there is none.
func (c Catalog) Get(id string) (Defect, bool) {
	for _, d := range c {
		if d.ID == id {
			return d, true
		}
	}
	return Defect{}, false
}

// EnvVar is the environment variable that overrides defaults for a run: comma-separated ID=live|fixed.
const EnvVar = "ENSEMBLE_DEFECTS"

// ParseOverrides parses an ENSEMBLE_DEFECTS value ("ID=live,ID=fixed"; spaces and empty items ignored)
// against the catalog. Errors: an item without "=", an unknown ID, a state other than live or fixed, an ID
// given twice; each error names the item and the accepted form.
func (c Catalog) ParseOverrides(v string) (map[string]State, error) {
	out := map[string]State{}
	for _, item := range strings.Split(v, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		id, raw, ok := strings.Cut(item, "=")
		id = strings.TrimSpace(id)
		st := State(strings.ToLower(strings.TrimSpace(raw)))
		if !ok {
			return nil, fmt.Errorf("pins: %s item %q has no '=': write ID=live or ID=fixed", EnvVar, item)
		}
		if _, known := c.Lookup(id); !known {
			return nil, fmt.Errorf("pins: %s names %q, which is not in the catalog: use one of %s", EnvVar, id, strings.Join(c.IDs(""), ", "))
		}
		if st != Live && st != Fixed {
			return nil, fmt.Errorf("pins: %s item %q: state must be live or fixed", EnvVar, item)
		}
		if _, dup := out[id]; dup {
			return nil, fmt.Errorf("pins: %s names %s twice: keep one", EnvVar, id)
		}
		out[id] = st
	}
	return out, nil
}

// IDs lists the catalog's IDs that start with prefix ("" for all), sorted.
func (c Catalog) IDs(prefix string) []string {
	var out []string
	for _, d := range c {
		if strings.HasPrefix(d.ID, prefix) {
			out = append(out, d.ID)
		}
	}
	sort.Strings(out)
	return out
}

// States returns the state of every defect whose ID starts with prefix, as an operator's Options.Live
// map (ID -> true when live): the catalog defaults, overridden by overrides.
func (c Catalog) States(prefix string, overrides map[string]State) map[string]bool {
	out := map[string]bool{}
	for _, d := range c {
		if !strings.HasPrefix(d.ID, prefix) {
			continue
		}
		st := d.Default
		if o, ok := overrides[d.ID]; ok {
			st = o
		}
		out[d.ID] = st == Live
	}
	return out
}

// FromEnv returns States(prefix, ...) with the overrides of $ENSEMBLE_DEFECTS. Errors: those of
// ParseOverrides.
func (c Catalog) FromEnv(prefix string) (map[string]bool, error) {
	o, err := c.ParseOverrides(os.Getenv(EnvVar))
	if err != nil {
		return nil, err
	}
	return c.States(prefix, o), nil
}

// State returns the state defect id has in this run (default or $ENSEMBLE_DEFECTS). Errors: an unknown
// id, or an invalid ENSEMBLE_DEFECTS.
func (c Catalog) State(id string) (State, error) {
	if _, ok := c.Lookup(id); !ok {
		return "", fmt.Errorf("pins: %q is not in the catalog", id)
	}
	m, err := c.FromEnv(id)
	if err != nil {
		return "", err
	}
	if m[id] {
		return Live, nil
	}
	return Fixed, nil
}

// PinState returns the state the pin of defect id gives its own operator instance: State(id), or its
// opposite when the entry is OwnInstanceLive. So with no override an OwnInstanceLive entry's pin runs the
// defect live, and ENSEMBLE_DEFECTS=id=live (the defect matrix's flip of a fixed Default) runs it fixed.
// Errors: those of State.
func (c Catalog) PinState(id string) (State, error) {
	st, err := c.State(id)
	if err != nil {
		return "", err
	}
	if d, _ := c.Get(id); d.OwnInstanceLive {
		if st == Live {
			return Fixed, nil
		}
		return Live, nil
	}
	return st, nil
}
