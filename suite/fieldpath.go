package suite

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// One field-path dialect serves every path the suite renders or reads: Change.Fields, FieldWriters,
// Ownership, the Differential oracle's differences, and what a spec declares with Permits,
// AllowSharedField and AllowDifference. A path is field names joined by dots, each optionally followed by
// list selectors in brackets (fieldPathGrammar). A list element's selector follows the list's kind, as the
// object's own managedFields show it (the API server writes them from the schema):
//   - a list keyed by fields (a list-map: x-kubernetes-list-map-keys, or a built-in type's merge key):
//     "[key=value]", or "[k1=v1,k2=v2]" for several keys, sorted by key, as "spec.ports[port=80,protocol=TCP]";
//   - a set of scalars: the value itself, as "metadata.finalizers[example.com/f]";
//   - any other list (atomic, or one the managedFields do not describe): a map element with a string
//     "type", "name" or "conditionType" field is "[type=Ready]" (the first of them it has), any other
//     element its index, "[0]".
// So a field a spec reads in Changes is the field Ownership names, and one rule (under) says whether a path
// is a declared path or below it.

// fieldPathGrammar is the form checkFieldPath accepts, quoted in its errors.
const fieldPathGrammar = `name{.name|[selector]}, a name holding no ".", "[" or "]" and a selector no "]", e.g. "status.conditions[type=Ready].status"`

// under reports whether path is prefix or a field below it: the one rule by which a declared path
// (Permits, AllowSharedField, AllowDifference, Ownership.Owners) covers a field.
func under(path, prefix string) bool {
	return path == prefix || strings.HasPrefix(path, prefix+".") || strings.HasPrefix(path, prefix+"[")
}

// listShape is how a list's elements are selected: by key fields (keys, sorted: every key any element of the
// list was keyed by, since a schema may let a key be absent) or as a set of scalars.
type listShape struct {
	keys []string
	set  bool
}

// listShapes reads, from obj's managedFields, the shape of every list they describe, by the list's path
// with each selector left empty ("spec.containers[].ports"). A fieldsV1 entry that does not parse
// describes nothing. nil when no entry describes a list.
func listShapes(obj client.Object) map[string]listShape {
	var out map[string]listShape
	for _, e := range obj.GetManagedFields() {
		if e.FieldsV1 == nil {
			continue
		}
		shapes := entryShapes(e.FieldsV1.Raw)
		if out == nil {
			// Entries are shared through the cache: the first is copied before another is merged into it.
			out = shapes
			continue
		}
		if len(shapes) > 0 {
			out = maps.Clone(out)
			for p, sh := range shapes {
				if _, ok := out[p]; !ok {
					out[p] = sh
				}
			}
		}
	}
	return out
}

// shapeCache keeps entryShapes's answers by the fieldsV1 text: an object's entries rarely change between
// two of its events (a write moves the entry's time, not its fields), and every event of the stream is
// flattened. It is emptied when it holds shapeCacheMax entries.
var shapeCache = struct {
	sync.Mutex
	m map[string]map[string]listShape
}{m: map[string]map[string]listShape{}}

const shapeCacheMax = 4096

// entryShapes is the shapes one fieldsV1 entry describes (shapesOf), read once per distinct entry. The map
// returned is shared: callers do not change it.
func entryShapes(raw []byte) map[string]listShape {
	shapeCache.Lock()
	shapes, ok := shapeCache.m[string(raw)]
	shapeCache.Unlock()
	if ok {
		return shapes
	}
	var set map[string]any
	shapes = map[string]listShape{}
	if json.Unmarshal(raw, &set) == nil {
		shapesOf("", set, shapes)
	}
	shapeCache.Lock()
	if len(shapeCache.m) >= shapeCacheMax {
		clear(shapeCache.m)
	}
	shapeCache.m[string(raw)] = shapes
	shapeCache.Unlock()
	return shapes
}

// shapesOf adds the shapes of the lists under a fieldsV1 set at the selector-less path prefix.
func shapesOf(prefix string, set map[string]any, out map[string]listShape) {
	for k, v := range set {
		p := prefix
		switch {
		case strings.HasPrefix(k, "f:"):
			p = join(prefix, k[2:])
		case strings.HasPrefix(k, "k:"):
			var kv map[string]any
			if json.Unmarshal([]byte(k[2:]), &kv) == nil {
				keys := out[prefix].keys
				for key := range kv {
					if !slices.Contains(keys, key) {
						keys = append(keys, key)
					}
				}
				sort.Strings(keys)
				out[prefix] = listShape{keys: keys}
			}
			p = prefix + "[]"
		case strings.HasPrefix(k, "v:"):
			out[prefix] = listShape{set: true}
			continue
		default:
			continue
		}
		if sub, ok := v.(map[string]any); ok {
			shapesOf(p, sub, out)
		}
	}
}

// keyedSelector renders a list-map element's selector from its key fields: "k1=v1,k2=v2", keys sorted.
func keyedSelector(kv map[string]any) string {
	parts := make([]string, 0, len(kv))
	for k, v := range kv {
		parts = append(parts, k+"="+scalar(v))
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// scalar renders a leaf value as paths and Change.Fields show it: a string as it is, a number in its
// shortest form, a bool as true or false.
func scalar(v any) string {
	switch t := v.(type) {
	case string:
		return t
	case bool:
		return strconv.FormatBool(t)
	case int64:
		return strconv.FormatInt(t, 10)
	case float64:
		// 'f', not 'g': a JSON number decoded as float64 (a fieldsV1 key) must read as the int64 the object
		// holds, 2000000 and not 2e+06.
		return strconv.FormatFloat(t, 'f', -1, 64)
	}
	return fmt.Sprint(v)
}

// selector renders the selector of element e, at index i, of a list of the given shape (known is false
// when the managedFields do not describe the list).
func selector(e any, i int, shape listShape, known bool) string {
	em, isMap := e.(map[string]any)
	switch {
	case known && shape.set && !isMap:
		return scalar(e)
	case known && len(shape.keys) > 0 && isMap:
		// The keys the element has, as its fieldsV1 entry names them (an optional key may be absent).
		kv := map[string]any{}
		for _, k := range shape.keys {
			if v, ok := em[k]; ok {
				kv[k] = v
			}
		}
		if len(kv) > 0 {
			return keyedSelector(kv)
		}
	case isMap:
		for _, k := range []string{"type", "name", "conditionType"} {
			if s, ok := em[k].(string); ok {
				return k + "=" + s
			}
		}
	}
	return strconv.Itoa(i)
}

// flatten renders an object as leaf path -> value, without resourceVersion, managedFields and timestamps.
// An unstructured object is read as it is (it is not copied: flatten only reads it).
func flatten(obj client.Object) map[string]string {
	var m map[string]any
	if u, ok := obj.(*unstructured.Unstructured); ok {
		m = u.Object
	} else {
		var err error
		if m, err = runtime.DefaultUnstructuredConverter.ToUnstructured(obj); err != nil {
			return map[string]string{"<unconvertible>": err.Error()}
		}
	}
	out := map[string]string{}
	flattenInto(out, listShapes(obj), "", "", m)
	return out
}

// ignoredMetadataKey reports whether a key of metadata is one the stream sets aside: the resourceVersion,
// which every write changes, and managedFields.
func ignoredMetadataKey(prefix, k string) bool {
	return prefix == "metadata" && (k == "resourceVersion" || k == "managedFields")
}

// ignoredTimeKey reports whether a map key holds a timestamp the stream sets aside (deletionTimestamp is
// kept: it marks the start of a deletion).
func ignoredTimeKey(k string) bool {
	if k == "deletionTimestamp" {
		return false
	}
	return strings.HasSuffix(k, "Time") || strings.HasSuffix(k, "Timestamp") || k == "startedAt" || k == "finishedAt"
}

// flattenInto adds v's leaves under path prefix to out; norm is prefix with its selectors left empty, by
// which shapes (listShapes) names the lists.
func flattenInto(out map[string]string, shapes map[string]listShape, prefix, norm string, v any) {
	switch t := v.(type) {
	case map[string]any:
		if len(t) == 0 && prefix != "" {
			out[prefix] = "{}"
		}
		for k, e := range t {
			if ignoredTimeKey(k) || ignoredMetadataKey(prefix, k) {
				continue
			}
			flattenInto(out, shapes, join(prefix, k), join(norm, k), e)
		}
	case []any:
		if len(t) == 0 {
			out[prefix] = "[]"
		}
		shape, known := shapes[norm]
		for i, e := range t {
			flattenInto(out, shapes, prefix+"["+selector(e, i, shape, known)+"]", norm+"[]", e)
		}
	default:
		out[prefix] = scalar(t)
	}
}

// checkFieldPath checks the syntax every field path of the suite shares (Change.Fields, Ownership, Permits,
// AllowDifference, AllowSharedField): field names joined by dots, each optionally followed by bracketed
// list selectors. It checks the form only, not that such a field exists. Errors: an empty name (a leading,
// trailing or doubled dot), a bracket left open, an empty selector, a stray "]".
func checkFieldPath(path string) error {
	bad := func(why string) error {
		return fmt.Errorf("field path %q is malformed (%s): write it as %s", path, why, fieldPathGrammar)
	}
	if path == "" {
		return bad("it is empty")
	}
	name := 0 // length of the name being read; -1 right after a selector
	for i := 0; i < len(path); i++ {
		switch path[i] {
		case '.':
			if name == 0 {
				return bad(fmt.Sprintf("an empty field name before the dot at byte %d", i))
			}
			name = 0
		case '[':
			if name == 0 {
				return bad(fmt.Sprintf("a selector at byte %d follows no field name", i))
			}
			end := strings.IndexByte(path[i+1:], ']')
			if end < 0 {
				return bad(fmt.Sprintf("the bracket at byte %d is never closed", i))
			}
			if end == 0 {
				return bad(fmt.Sprintf("an empty selector at byte %d", i))
			}
			if j := strings.IndexByte(path[i+1:i+1+end], '['); j >= 0 {
				return bad(fmt.Sprintf("the bracket at byte %d is opened inside a selector", i+1+j))
			}
			i += end + 1
			name = -1
		case ']':
			return bad(fmt.Sprintf("a \"]\" at byte %d closes no selector", i))
		default:
			if name < 0 {
				return bad(fmt.Sprintf("the selector ending at byte %d is followed by %q: put a dot before the next field name", i-1, path[i]))
			}
			name++
		}
	}
	if name == 0 {
		return bad("it ends with a dot")
	}
	return nil
}
