package suite

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Ownership maps each field manager of an object to the field paths it owns, read from managedFields
// (both the object and its subresources). Paths are rendered from the fieldsV1 set, e.g.
// "status.podRoles.pod-0" or "status.conditions[type=Available].status".
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
		sort.Strings(out[m])
	}
	return out, nil
}

// walkFields renders a fieldsV1 set ("f:name", "k:{json}", "v:value", ".") into leaf paths.
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
				var parts []string
				for kk, vv := range kv {
					parts = append(parts, fmt.Sprintf("%s=%v", kk, vv))
				}
				sort.Strings(parts)
				sel = strings.Join(parts, ",")
			}
			p = prefix + "[" + sel + "]"
		case strings.HasPrefix(k, "v:"):
			p = prefix + "[" + k[2:] + "]"
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

// Managers lists the field managers, sorted.
func (o Ownership) Managers() []string {
	var out []string
	for m := range o {
		out = append(out, m)
	}
	sort.Strings(out)
	return out
}

// Owners lists the managers owning path or a field below it, sorted.
func (o Ownership) Owners(path string) []string {
	var out []string
	for m, paths := range o {
		for _, p := range paths {
			if p == path || strings.HasPrefix(p, path+".") || strings.HasPrefix(p, path+"[") {
				out = append(out, m)
				break
			}
		}
	}
	sort.Strings(out)
	return out
}

// SharedFields returns, for each leaf path owned by two or more managers, those managers. Empty when every
// field has one owner.
func (o Ownership) SharedFields() map[string][]string {
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

// RequireDeclaredManagers returns an error naming every field manager of obj that is not in declared
// (a manager named after a User-Agent, for instance), with the fields it owns; nil when all are declared.
func RequireDeclaredManagers(obj client.Object, declared ...string) error {
	o, err := OwnershipOf(obj)
	if err != nil {
		return err
	}
	ok := map[string]bool{}
	for _, d := range declared {
		ok[d] = true
	}
	var bad []string
	for _, m := range o.Managers() {
		if !ok[m] {
			bad = append(bad, fmt.Sprintf("%s owns %s", m, strings.Join(o[m], ", ")))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%s %s has undeclared field managers (declared: %s):\n%s", obj.GetObjectKind().GroupVersionKind().Kind, obj.GetName(), strings.Join(declared, ", "), indent(bad))
	}
	return nil
}

// RequireSingleOwners returns an error naming every field of obj owned by two or more managers; nil when
// each field has one owner.
func RequireSingleOwners(obj client.Object) error {
	o, err := OwnershipOf(obj)
	if err != nil {
		return err
	}
	shared := o.SharedFields()
	if len(shared) == 0 {
		return nil
	}
	var lines []string
	for p, ms := range shared {
		lines = append(lines, p+": "+strings.Join(ms, ", "))
	}
	sort.Strings(lines)
	return fmt.Errorf("%s has fields owned by more than one manager:\n%s", obj.GetName(), indent(lines))
}
