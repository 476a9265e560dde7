package perturb

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Record is what one case did, as a case writes it at its cleanup when ENSEMBLE_EXPLORE names a directory:
// its writes (from which make explore enumerates points), the points set on it and where they fired, and
// its end state (which the differential oracle compares). One JSON file per case.
type Record struct {
	// Spec is the test's name (Ginkgo's full spec text); Namespace the case's namespace.
	Spec      string `json:"spec"`
	Namespace string `json:"namespace"`
	// Run is which run of its spec in the process the case belongs to, from 1 (see ParseRuns).
	Run int `json:"run,omitempty"`
	// Started is when the case was made; Ended when its cleanup wrote the record.
	Started time.Time `json:"started"`
	Ended   time.Time `json:"ended"`
	// Points are the points set on the case, as strings; Fired names each firing, "point at Kind/name
	// (verb by writer)", in order.
	Points []string `json:"points,omitempty"`
	Fired  []string `json:"fired,omitempty"`
	// Externals are the external systems the suite registered (suite.Options.Externals), for down and slow
	// points.
	Externals []string `json:"externals,omitempty"`
	// Calls are, by external system, when each operator call reached it in the case's namespace, in order,
	// in an unperturbed run that records reads (ReadsRecorded), for the systems whose suite.External says
	// (Calls); a system missing here is one the run cannot say of.
	Calls map[string][]time.Time `json:"calls,omitempty"`
	// Writes are the case's writes by operators and fakes (not the spec's own, nor those read from
	// kube-apiserver's audit log, such as kube-controller-manager's, which no point answers), oldest first.
	Writes []RecordWrite `json:"writes"`
	// Changes counts each object's changes in the case's namespace, by "Kind/name" (a name written as in
	// RecordWrite.Object); Seen counts, by manager,
	// those its cache's watch could deliver (after its informer for the kind began watching): the range of
	// the change triggers of that manager's points, which fire in that watch.
	Changes map[string]int            `json:"changes,omitempty"`
	Seen    map[string]map[string]int `json:"seen,omitempty"`
	// ChangeTimes are, by object as Changes names it, when the event stream saw each of its changes, in
	// order (the n-th change trigger of a manager that saw every change fires at the n-th).
	ChangeTimes map[string][]time.Time `json:"changeTimes,omitempty"`
	// ReadsRecorded says the run recorded reads (an unperturbed run under ENSEMBLE_EXPLORE): Reads are then
	// every Get and List the managers made of the case's objects, through their caches and, in a pass or a
	// Runnable, through their clients' uncached reads, in the order they returned. Without it Reads says
	// nothing, and make explore prunes no point by them.
	ReadsRecorded bool         `json:"readsRecorded,omitempty"`
	Reads         []RecordRead `json:"reads,omitempty"`
	// Others are the case's writes that Writes leaves out because no point answers them, with their times:
	// the spec's own ("case/spec") and those read from kube-apiserver's audit log (kube-controller-manager's).
	// They change objects between an operator's writes, so the pruning reads them.
	Others []RecordWrite `json:"others,omitempty"`
	// EndState maps "Kind/name" to the object's leaf fields as the event stream flattens them, with the
	// volatile ones left out (see Volatile) and the namespace written as "<namespace>". Objects created
	// with generateName are keyed "Kind/<generateName>*" and numbered in the order of their content.
	EndState map[string]map[string]string `json:"endState"`
	// Failed is the test's verdict at the case's cleanup; Failures are the cleanup's own failures (oracles,
	// scripts, invariants, deletion hygiene), first lines only.
	Failed   bool     `json:"failed"`
	Failures []string `json:"failures,omitempty"`
	// SpecFailed says the test had already failed when the case's cleanup began: the spec failed on its own
	// (an assertion of its body), before the cleanup's checks. The convergence oracle then did not wait for
	// the end state to settle, so the differential oracle compared an unsettled one, and make explore leads
	// the point's row with the spec's failure (false in records written before it was recorded).
	SpecFailed bool `json:"specFailed,omitempty"`
}

// RecordWrite is one write of a Record: its writer ("manager/controller", or the manager alone outside a
// pass), its object ("Kind/name", the case's namespace in the name written as CaseNamespace, as a Point may
// name it), verb and subresource, and whether the API server refused it.
type RecordWrite struct {
	Writer      string `json:"writer"`
	Object      string `json:"object"`
	Verb        string `json:"verb"`
	Subresource string `json:"subresource,omitempty"`
	Rejected    bool   `json:"rejected,omitempty"`
	// At is when the write returned (zero in records written before it was recorded).
	At time.Time `json:"at,omitzero"`
	// NoOp says the write succeeded and answered with the resourceVersion its object already had (as an
	// earlier recorded write answered): it changed nothing, and no watch delivered it.
	NoOp bool `json:"noop,omitempty"`
}

// Changed reports whether the write changed its object: it was neither refused nor a no-op.
func (w RecordWrite) Changed() bool { return !w.Rejected && !w.NoOp }

// RecordRead is one read of a Record: its reader ("manager/controller", "manager/runnable", or the manager
// alone outside a pass), its object ("Kind/name" as RecordWrite names it, or "Kind/" for a List of the kind
// in the case's namespace or in all namespaces) and when it returned.
type RecordRead struct {
	Reader string    `json:"reader"`
	Object string    `json:"object"`
	At     time.Time `json:"at"`
}

// Covers reports whether the read saw object ("Kind/name"): a Get of it, or a List of its kind.
func (r RecordRead) Covers(object string) bool {
	if r.Object == object {
		return true
	}
	kind, name, _ := strings.Cut(r.Object, "/")
	return name == "" && strings.HasPrefix(object, kind+"/")
}

// Volatile reports whether a flattened field path differs from run to run by nature (identifiers, counters
// of writes, addresses a run hands out), so the differential oracle never compares it.
func Volatile(path string) bool {
	last := path
	if i := strings.LastIndex(path, "."); i >= 0 {
		last = path[i+1:]
	}
	switch last {
	case "uid", "generation", "observedGeneration", "podIP", "hostIP", "ip", "containerID", "imageID", "holderIdentity", "leaseTransitions":
		return true
	}
	return path == "metadata.namespace" || path == "metadata.name" || strings.HasPrefix(path, "status.podIPs") ||
		strings.HasPrefix(path, "status.hostIPs") || strings.HasSuffix(path, "resourceVersion")
}

// Difference is one way a perturbed run's end state differs from the unperturbed runs'.
type Difference struct {
	// Object is "Kind/name", or the Kind alone for a difference in the count of objects named anew each run.
	Object string
	// Path is the field that differs, in the suite's field-path dialect; empty for a whole object or a count.
	Path string
	// Want and Got are the field's unperturbed and perturbed values ("<absent>" for none). For a whole
	// object Want is "missing" (the unperturbed runs ended with it) or Got "unexpected" (they ended without
	// it); for a count they are the two counts.
	Want, Got string
}

// absent is the value of a field an object does not have, as the suite's Change.Fields writes it.
const absent = "<absent>"

// The values of Difference.Want and Got for a whole object.
const (
	Missing    = "missing"
	Unexpected = "unexpected"
)

// Count reports whether d is a difference in the count of a kind's objects named anew each run.
func (d Difference) Count() bool { return !strings.Contains(d.Object, "/") }

// String renders d on one line: "Kind/name path: want -> got", "Kind/name: missing (...)",
// "Kind/name: unexpected (...)" or "Kind: N objects named anew each run, ...".
func (d Difference) String() string {
	switch {
	case d.Count():
		return fmt.Sprintf("%s: %s objects named anew each run, the unperturbed runs ended with %s", d.Object, d.Got, d.Want)
	case d.Path == "" && d.Want == Missing:
		return d.Object + ": missing (the unperturbed run ended with it)"
	case d.Path == "":
		return d.Object + ": unexpected (the unperturbed run ended without it)"
	}
	return fmt.Sprintf("%s %s: %s -> %s", d.Object, d.Path, d.Want, d.Got)
}

// Diff compares a perturbed run's end state with the unperturbed runs' and returns the differences field by
// field, sorted by their String. A field
// whose value differs between the unperturbed runs themselves is volatile for this spec and not compared, and
// when they do not agree on which fields an object has, a field that none of them had is not reported; with
// one baseline only Volatile's fields are left out. Objects of a kind the unperturbed runs name anew each run
// (some in one run and not the other) are compared by their count only. No baseline: nil.
func Diff(baselines []map[string]map[string]string, got map[string]map[string]string) []Difference {
	if len(baselines) == 0 {
		return nil
	}
	want := baselines[0]
	var out []Difference
	for obj, fields := range want {
		g, ok := got[obj]
		if !ok {
			if inEvery(baselines, obj) {
				out = append(out, Difference{Object: obj, Want: Missing})
			}
			continue
		}
		for path, w := range fields {
			if volatileHere(baselines, obj, path) {
				continue
			}
			gv, ok := g[path]
			switch {
			case !ok:
				out = append(out, Difference{Object: obj, Path: path, Want: w, Got: absent})
			case gv != w:
				out = append(out, Difference{Object: obj, Path: path, Want: w, Got: gv})
			}
		}
		// When the unperturbed runs do not agree on which fields obj has (a key named after a hash of
		// run-specific content), a field none of them had says nothing either.
		sameKeys := sameFieldNames(baselines, obj)
		for path, gv := range g {
			if _, ok := fields[path]; !ok && sameKeys && !volatileHere(baselines, obj, path) {
				out = append(out, Difference{Object: obj, Path: path, Want: absent, Got: gv})
			}
		}
	}
	// A kind some of whose objects are in one unperturbed run and not the other is named anew each run (an
	// operator's random suffix): its objects outside every baseline are compared by count, not by name.
	renamed := renamedKinds(baselines)
	for obj := range got {
		if _, ok := want[obj]; !ok && !inAny(baselines, obj) && !renamed[kindOf(obj)] {
			out = append(out, Difference{Object: obj, Got: Unexpected})
		}
	}
	for kind := range renamed {
		n := func(m map[string]map[string]string) int {
			c := 0
			for obj := range m {
				if kindOf(obj) == kind && !inEvery(baselines, obj) {
					c++
				}
			}
			return c
		}
		w, same := n(baselines[0]), true
		for _, b := range baselines[1:] {
			same = same && n(b) == w
		}
		// got's objects named anew are those in no baseline or not in every one.
		if g := n(got); same && g != w {
			out = append(out, Difference{Object: kind, Want: strconv.Itoa(w), Got: strconv.Itoa(g)})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// renamedKinds returns the kinds with an object that is in some baselines and not in all of them.
func renamedKinds(baselines []map[string]map[string]string) map[string]bool {
	out := map[string]bool{}
	for _, b := range baselines {
		for obj := range b {
			if !inEvery(baselines, obj) {
				out[kindOf(obj)] = true
			}
		}
	}
	return out
}

// kindOf is the Kind of a "Kind/name" key.
func kindOf(obj string) string {
	k, _, _ := strings.Cut(obj, "/")
	return k
}

// volatileHere reports whether obj's path is left out: volatile by nature, a timestamp, or not the same in
// every baseline.
func volatileHere(baselines []map[string]map[string]string, obj, path string) bool {
	if Volatile(path) {
		return true
	}
	first, firstOK := baselines[0][obj][path]
	if firstOK && (timestamp(first) || address(first)) {
		return true
	}
	for _, b := range baselines[1:] {
		fields, ok := b[obj]
		if !ok {
			return true
		}
		v, ok := fields[path]
		if ok != firstOK || v != first {
			return true
		}
	}
	return false
}

// timestamp reports whether v is an RFC 3339 time, as Kubernetes writes metav1.Time: a field that holds one
// tells when something happened, which differs from run to run whatever its name (cluster-api's Machine
// status.lastUpdated; the stream already sets aside keys ending in Time or Timestamp). Two unperturbed runs in
// the same second agree on it by chance.
func timestamp(v string) bool {
	if len(v) < len("2006-01-02T15:04:05Z") || v[4] != '-' || v[10] != 'T' {
		return false
	}
	_, err := time.Parse(time.RFC3339, v)
	return err == nil
}

// address reports whether v is an IP address, or one with a port ("239.244.0.4:8265"): the kubelet stand-in,
// the API server and kube-controller-manager hand addresses out in order, so a field that holds one (a pod's,
// a Service's, KubeRay's status.head.serviceIP) differs between runs that made their objects in another order
// or after other runs in the same process, whatever its name.
func address(v string) bool {
	if host, _, err := net.SplitHostPort(v); err == nil {
		v = host
	}
	return net.ParseIP(v) != nil
}

// sameFieldNames reports whether every baseline has obj with the same set of field paths.
func sameFieldNames(baselines []map[string]map[string]string, obj string) bool {
	first := baselines[0][obj]
	for _, b := range baselines[1:] {
		f, ok := b[obj]
		if !ok || len(f) != len(first) {
			return false
		}
		for p := range f {
			if _, ok := first[p]; !ok {
				return false
			}
		}
	}
	return true
}

func inEvery(baselines []map[string]map[string]string, obj string) bool {
	for _, b := range baselines {
		if _, ok := b[obj]; !ok {
			return false
		}
	}
	return true
}

func inAny(baselines []map[string]map[string]string, obj string) bool {
	for _, b := range baselines {
		if _, ok := b[obj]; ok {
			return true
		}
	}
	return false
}

// ReadRecords reads the Records (*.json) a run wrote to dir, as ENSEMBLE_EXPLORE writes them; none when it
// wrote none. Errors: an unreadable directory or file, a file that is not a Record (naming it).
func ReadRecords(dir string) ([]Record, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	var out []Record
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var r Record
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("%s is not a perturb.Record: %w", f, err)
		}
		out = append(out, r)
	}
	return out, nil
}
