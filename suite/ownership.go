package suite

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"

	"github.com/onsi/gomega/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Ownership maps each field manager of an object to the field paths it owns, read from managedFields
// (both the object and its subresources). Paths are rendered from the fieldsV1 set in the dialect
// Change.Fields uses (fieldpath.go), e.g. "status.podRoles.pod-0", "status.conditions[type=Available].status"
// or "metadata.finalizers[example.com/f]". The entries of one manager name
// (its Apply and its Update entries, its main-resource and its status entries) are merged: a field both own is
// listed once under that name.
type Ownership map[string][]string

// OwnershipOf reads obj's managedFields. Errors: a fieldsV1 entry that is not valid JSON.
func OwnershipOf(obj client.Object) (Ownership, error) {
	out := Ownership{}
	for _, e := range obj.GetManagedFields() {
		if e.FieldsV1 == nil {
			continue
		}
		var set map[string]any
		if err := json.Unmarshal(e.FieldsV1.Raw, &set); err != nil {
			return nil, fmt.Errorf("suite: managedFields of %s, manager %s: %w", obj.GetName(), e.Manager, err)
		}
		var paths []string
		walkFields("", set, &paths)
		out[e.Manager] = append(out[e.Manager], paths...)
	}
	for m := range out {
		// One manager can hold several entries (an apply and an update, the object and its status): a
		// field in two of them is still owned by one manager.
		sort.Strings(out[m])
		out[m] = slices.Compact(out[m])
	}
	return out, nil
}

// walkFields renders a fieldsV1 set ("f:name", "k:{json}", "v:value", ".") into leaf paths, in the
// suite's one field-path dialect (fieldpath.go).
func walkFields(prefix string, set map[string]any, out *[]string) {
	leaf := true
	for k, v := range set {
		if k == "." {
			continue
		}
		leaf = false
		var p string
		switch {
		case strings.HasPrefix(k, "f:"):
			p = join(prefix, k[2:])
		case strings.HasPrefix(k, "k:"):
			var kv map[string]any
			sel := k[2:]
			if json.Unmarshal([]byte(k[2:]), &kv) == nil {
				sel = keyedSelector(kv)
			}
			p = prefix + "[" + sel + "]"
		case strings.HasPrefix(k, "v:"):
			var val any
			sel := k[2:]
			if json.Unmarshal([]byte(k[2:]), &val) == nil {
				sel = scalar(val)
			}
			p = prefix + "[" + sel + "]"
		default:
			p = join(prefix, k)
		}
		if sub, ok := v.(map[string]any); ok && len(sub) > 0 {
			walkFields(p, sub, out)
		} else {
			*out = append(*out, p)
		}
	}
	if leaf && prefix != "" {
		*out = append(*out, prefix)
	}
}

func join(a, b string) string {
	if a == "" {
		return b
	}
	return a + "." + b
}

// Owners lists the managers owning path or a field below it, sorted.
func (o Ownership) Owners(path string) []string {
	var out []string
	for m, paths := range o {
		for _, p := range paths {
			if under(p, path) {
				out = append(out, m)
				break
			}
		}
	}
	sort.Strings(out)
	return out
}

// sharedFields returns, for each leaf path owned by two or more managers, those managers. Empty when every
// field has one owner.
func (o Ownership) sharedFields() map[string][]string {
	byPath := map[string][]string{}
	for m, paths := range o {
		for _, p := range paths {
			byPath[p] = append(byPath[p], m)
		}
	}
	out := map[string][]string{}
	for p, ms := range byPath {
		if len(ms) > 1 {
			sort.Strings(ms)
			out[p] = ms
		}
	}
	return out
}

// HaveSingleFieldOwners succeeds for an object (a client.Object read with its managedFields) none of whose
// leaf fields is owned by two or more field managers. The failure names each shared field and its managers.
func HaveSingleFieldOwners() types.GomegaMatcher {
	return ownershipMatcher{want: "every field owned by one field manager", check: func(o Ownership) []string {
		var lines []string
		for p, ms := range o.sharedFields() {
			lines = append(lines, p+" is owned by "+strings.Join(ms, ", "))
		}
		return lines
	}}
}

// HaveFieldManagersWithin succeeds for an object every field manager of which is in declared. The failure
// names each undeclared manager (a name the API server derived from a User-Agent, for instance) and the
// fields it owns.
func HaveFieldManagersWithin(declared ...string) types.GomegaMatcher {
	ok := map[string]bool{}
	for _, d := range declared {
		ok[d] = true
	}
	return ownershipMatcher{want: "field managers within [" + strings.Join(declared, ", ") + "]", check: func(o Ownership) []string {
		var lines []string
		for m, paths := range o {
			if !ok[m] {
				lines = append(lines, m+" (undeclared) owns "+strings.Join(paths, ", "))
			}
		}
		return lines
	}}
}

// ownershipMatcher is a Gomega matcher over an object's Ownership; check returns one line per offence.
type ownershipMatcher struct {
	want  string
	check func(Ownership) []string
}

func (m ownershipMatcher) Match(actual any) (bool, error) {
	_, lines, err := m.eval(actual)
	return len(lines) == 0, err
}

func (m ownershipMatcher) eval(actual any) (string, []string, error) {
	obj, ok := actual.(client.Object)
	if !ok || obj == nil || reflect.ValueOf(obj).IsNil() {
		return "", nil, fmt.Errorf("ownership matcher: want a client.Object read from the API server, got %T", actual)
	}
	if len(obj.GetManagedFields()) == 0 {
		return "", nil, fmt.Errorf("ownership matcher: %s has no managedFields: read it from the API server (c.Get) before checking who owns its fields", key(obj.GetNamespace(), obj.GetName()))
	}
	o, err := OwnershipOf(obj)
	if err != nil {
		return "", nil, err
	}
	lines := m.check(o)
	sort.Strings(lines)
	kind := obj.GetObjectKind().GroupVersionKind().Kind
	return strings.TrimSpace(kind + " " + key(obj.GetNamespace(), obj.GetName())), lines, nil
}

func (m ownershipMatcher) FailureMessage(actual any) string {
	name, lines, err := m.eval(actual)
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("expected %s to have %s, but:\n%s", name, m.want, indent(lines))
}

func (m ownershipMatcher) NegatedFailureMessage(actual any) string {
	name, _, _ := m.eval(actual)
	return fmt.Sprintf("expected %s not to have %s, but it has", name, m.want)
}
