package suite

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode"
)

// External is a system outside Kubernetes that a fake plays (a topology store, a registry), by the name
// perturbation points use (perturb.Point.System: "down(pooler)@...", "slow(hakeeper,200ms)@...").
type External struct {
	// Name is the system's name in points; unique, non-empty, no '(' ')' ',' or space.
	Name string
	// Down makes the system unavailable in namespace (on) or available again (off).
	Down func(namespace string, on bool)
	// Slow makes the system answer after latency in namespace; 0 ends it.
	Slow func(namespace string, latency time.Duration)
	// Calls, when set, returns when each operator call reached the system in namespace, in order: an
	// unperturbed run's explore record keeps them (perturb.Record.Calls), and make explore takes two down
	// or slow points of the system to be one when no call came between their triggers. Nil: the fake cannot
	// say, and no down or slow point of the system is pruned.
	Calls func(namespace string) []time.Time
}

// externalNameBreakers are the characters a point's text gives a meaning to around a system's name
// ("slow(pooler,200ms)@writer", points separated by ';' or spaces); unicode spaces are refused too.
const externalNameBreakers = "(),@;"

// validateExternals checks Options.Externals and returns them by name. Errors (one line each, naming the
// entry by its index): an empty, duplicate or unwritable Name, a nil Down or Slow.
func validateExternals(es []External) (map[string]External, error) {
	byName := map[string]External{}
	at := map[string]int{}
	for i, e := range es {
		switch {
		case e.Name == "":
			return nil, fmt.Errorf("suite: Options.Externals[%d] has an empty Name: name the system as perturbation points write it, e.g. \"pooler\" for down(pooler)@...", i)
		case strings.ContainsAny(e.Name, externalNameBreakers) || strings.IndexFunc(e.Name, unicode.IsSpace) >= 0:
			return nil, fmt.Errorf("suite: Options.Externals[%d]: Name %q holds one of ( ) , @ ; or a space, which a point's text cannot carry: use a plain name such as \"pooler\"", i, e.Name)
		case e.Down == nil:
			return nil, fmt.Errorf("suite: Options.Externals[%d] (%q) has no Down: set it to a func that makes the system unavailable in a namespace (on) and available again (off)", i, e.Name)
		case e.Slow == nil:
			return nil, fmt.Errorf("suite: Options.Externals[%d] (%q) has no Slow: set it to a func that makes the system answer after a latency in a namespace (0 ends it)", i, e.Name)
		}
		if j, dup := at[e.Name]; dup {
			return nil, fmt.Errorf("suite: Options.Externals[%d] and [%d] are both named %q: give each external system a unique Name (points name it)", j, i, e.Name)
		}
		at[e.Name] = i
		byName[e.Name] = e
	}
	return byName, nil
}

// external returns the external system registered under name. Errors: none is, with the names that are.
func (s *Suite) external(name string) (External, error) {
	if e, ok := s.externals[name]; ok {
		return e, nil
	}
	names := slices.Sorted(maps.Keys(s.externals))
	if len(names) == 0 {
		return External{}, fmt.Errorf("suite: no external system %q: Options.Externals registers none; register the system a fake plays there", name)
	}
	return External{}, fmt.Errorf("suite: no external system %q: Options.Externals registers %s", name, strings.Join(names, ", "))
}
