package suite

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/ensembletest/ensemble/suite/perturb"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Oracle names one of the checks every Case runs without being asked (docs/architecture.md, "Oracles").
// A spec turns one off with Case.OptOut and a reason.
type Oracle string

// The oracles every case runs.
const (
	// HotLoop fails a case in which the writers of one object (one incarnation: one uid, so a name
	// deleted and created again starts afresh) answer each other's writes at 10 writes/s or more for 1.5 s (at least 5 writes in each of three consecutive 500 ms slices, and no other
	// object of the namespace changed in between by a writer that does not write this object), such as two
	// field managers flipping a field. It counts the
	// writes of the operators and fakes that changed the object or were rejected; not the spec's own, not
	// no-ops, and not the writes of passes a requeue woke (see Pass.Requeued), whose pace a time scale and
	// requeue compression set. Other loops never settle, and Convergence fails them. It watches while the
	// spec runs and notes the moment the threshold is crossed.
	HotLoop Oracle = "hot-loop"
	// SharedFields fails a case in which, at its end, a leaf field of an object in its namespace is owned by
	// two field managers in managedFields, unless the spec declared the field with AllowSharedField.
	SharedFields Oracle = "shared-fields"
	// Convergence fails a case whose objects do not stop changing (250 ms without a change and without a
	// running pass; writes that change nothing, such as a periodic requeue's, do not count) within 10 s of
	// the spec's end, whose last pass of a controller key ended in an error (but one cut short by its
	// manager instance's stop, whose error is that cancellation), or in whose namespace no
	// controller ever ran a reconcile pass.
	Convergence Oracle = "convergence"
	// Differential fails a case run with ENSEMBLE_BASELINE (as make explore runs a perturbed spec) whose end
	// state differs from the unperturbed runs' of the same spec, field by field: the case's objects after
	// the other oracles, without the fields that differ between the unperturbed runs themselves or by
	// nature (see perturb.Volatile). A case that opted out of Convergence is not judged: its end state is
	// not a settled one.
	Differential Oracle = "differential"
)

// The convergence bound: quiet for convergenceWindow within convergenceTimeout.
const (
	convergenceWindow  = 250 * time.Millisecond
	convergenceTimeout = 10 * time.Second
)

// oracleSpec is one oracle as oracleTable registers it.
type oracleSpec struct {
	// name is the oracle; ident is the Go name a spec writes after "suite."; forbids says, in a phrase, what
	// the oracle fails a case for (OptOut's error lists it).
	name           Oracle
	ident, forbids string
	// check returns the oracle's failures at the case's end, each a message that names the oracle, and
	// marks them on the case's timeline.
	check func(c *Case, j *judgement) []string
}

// oracleTable registers every oracle once, in the order a case's end runs them. An oracle is its constant
// above, its row here and its check; an oracle's own behaviour elsewhere (a hot-loop threshold a quiescence
// wait shares, Convergence's end state that Differential needs) names it there, but no list of oracles is
// kept anywhere else.
var oracleTable = []oracleSpec{
	{HotLoop, "HotLoop", "an object's writers answering each other's writes at 10/s or more for 1.5 s", (*Case).hotLoopErrors},
	{SharedFields, "SharedFields", "a field owned by two field managers at the case's end", (*Case).sharedFieldErrors},
	{Convergence, "Convergence", "a namespace still changing 10 s after the spec's end", (*Case).convergenceErrors},
	{Differential, "Differential", "an end state other than the unperturbed runs' (ENSEMBLE_BASELINE)", (*Case).differentialErrors},
}

// judgement is what the oracles of one case's end share: their failures so far, the case's end state, read
// once when an oracle or the case's explore record needs it, whether the spec had failed before its
// cleanup began (specFailed), and whether the convergence oracle saw the namespace settle (settled).
type judgement struct {
	failures   []string
	end        map[string]map[string]string
	specFailed bool
	settled    bool
}

// endState is the case's end state (Case.endState), read on first use.
func (j *judgement) endState(c *Case) map[string]map[string]string {
	if j.end == nil {
		j.end = c.endState()
	}
	return j.end
}

// OptOut turns the oracle o off for this case. reason (required) says why the spec's operator may do what
// the oracle forbids, e.g. that a live defect pinned by the spec keeps the namespace busy; it is shown in the
// spec's report. An unknown oracle or an empty reason fails the test.
func (c *Case) OptOut(o Oracle, reason string) {
	c.t.Helper()
	if !slices.ContainsFunc(oracleTable, func(s oracleSpec) bool { return s.name == o }) {
		var use []string
		for _, s := range oracleTable {
			use = append(use, fmt.Sprintf("suite.%s (%s: %s)", s.ident, s.name, s.forbids))
		}
		c.fatalf("suite: OptOut(%q): no such oracle: use one of %s", o, strings.Join(use, ", "))
		return
	}
	if strings.TrimSpace(reason) == "" {
		c.fatalf("suite: OptOut(%s) without a reason: say why this spec's operator may do what the oracle forbids", o)
		return
	}
	c.mu.Lock()
	if c.optOuts == nil {
		c.optOuts = map[Oracle]string{}
	}
	c.optOuts[o] = reason
	c.mu.Unlock()
	c.report("oracle "+string(o)+" opted out", reason)
}

// Objects selects the objects of a case's namespace an oracle exception (AllowSharedField, AllowDifference)
// covers: every object of Kind (required), only the one named Name when Name is set, and only those with an
// ownerReference of kind OwnerKind when OwnerKind is set. Select by Kind, narrowed by OwnerKind, the objects
// whose names are generated (the MachineSets a MachineDeployment makes, whose finalizers it co-owns on
// purpose), and by Name one object of a fixed name.
type Objects struct {
	// Kind is the objects' kind, as in Change.Kind ("MachineSet").
	Kind string
	// Name, when set, selects the one object of that name.
	Name string
	// OwnerKind, when set, selects only the objects with an ownerReference of that kind ("MachineDeployment").
	OwnerKind string
}

// String renders the selection as reports show it: "Kind/name", or "every Kind", each followed by
// " owned by a OwnerKind" when OwnerKind is set.
func (o Objects) String() string {
	s := o.Kind + "/" + o.Name
	if o.Name == "" {
		s = "every " + o.Kind
	}
	if o.OwnerKind != "" {
		s += " owned by a " + o.OwnerKind
	}
	return s
}

// covers reports whether the object kind/name, whose ownerReferences have the kinds ownerKinds, is selected.
func (o Objects) covers(kind, name string, ownerKinds []string) bool {
	return o.Kind == kind && (o.Name == "" || o.Name == name) && (o.OwnerKind == "" || slices.Contains(ownerKinds, o.OwnerKind))
}

// AllowSharedField declares that the field path (e.g. "status.conditions[type=Ready].status", in the
// dialect OwnershipOf and Change.Fields share) of the objects selected, or any field under it, may be owned
// by more than one field manager at the case's end; reason is shown in the spec's report. The SharedFields
// oracle still checks every other field. Without a kind, a path or a reason, or with a malformed path (see
// the form in its error), the test fails.
func (c *Case) AllowSharedField(objects Objects, path, reason string) {
	c.t.Helper()
	if c.allowField("AllowSharedField", &c.sharedOK, objects, path, reason, "why two field managers may own it") {
		c.report("shared field allowed", fmt.Sprintf("%s %s: %s", objects, path, reason))
	}
}

// fieldAllowance is a field a spec declared with AllowSharedField or AllowDifference: the field path of the
// objects selected, which covers that field and every field under it (the rule under states).
type fieldAllowance struct {
	objects Objects
	path    string
}

// allowField checks a declaration of call (AllowSharedField or AllowDifference) and adds it to to; why says
// what the reason must explain. A missing part or a malformed path fails the test, adds nothing and
// returns false.
func (c *Case) allowField(call string, to *[]fieldAllowance, objects Objects, path, reason, why string) bool {
	c.t.Helper()
	if objects.Kind == "" || path == "" || strings.TrimSpace(reason) == "" {
		c.fatalf("suite: %s(%#v, %q, %q): give the objects' Kind (a Name or an OwnerKind narrows them), the field path and %s", call, objects, path, reason, why)
		return false
	}
	if err := checkFieldPath(path); err != nil {
		c.fatalf("suite: %s(%#v, %q, ...): %v", call, objects, path, err)
		return false
	}
	c.mu.Lock()
	*to = append(*to, fieldAllowance{objects, path})
	c.mu.Unlock()
	return true
}

// fieldAllowed reports whether one of the allowances covers field path of the object kind/name, whose
// ownerReferences have the kinds ownerKinds.
func (c *Case) fieldAllowed(allowances []fieldAllowance, kind, name string, ownerKinds []string, path string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, a := range allowances {
		if a.objects.covers(kind, name, ownerKinds) && under(path, a.path) {
			return true
		}
	}
	return false
}

// ownerKinds lists the kinds of obj's ownerReferences.
func ownerKinds(obj client.Object) []string {
	var out []string
	for _, r := range obj.GetOwnerReferences() {
		out = append(out, r.Kind)
	}
	return out
}

// flatOwnerKinds lists the kinds of the ownerReferences of an object flattened as the end state holds it
// (fields "metadata.ownerReferences[<selector>].kind").
func flatOwnerKinds(fields map[string]string) []string {
	var out []string
	for p, v := range fields {
		if strings.HasPrefix(p, "metadata.ownerReferences[") && strings.HasSuffix(p, "].kind") {
			out = append(out, v)
		}
	}
	return out
}

// report adds a report entry shown without -v (Ginkgo), or logs it.
func (c *Case) report(name, msg string) {
	if r, ok := c.t.(reporter); ok {
		r.AddReportEntryVisibilityAlways(name, msg)
	} else {
		c.t.Logf("%s: %s", name, msg)
	}
}

func (c *Case) optedOut(o Oracle) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.optOuts[o]
	return ok
}

// runOracles runs, in oracleTable's order, the oracles the spec did not opt out of, and returns their
// failures.
func (c *Case) runOracles(j *judgement) []string {
	for _, o := range oracleTable {
		if !c.optedOut(o.name) {
			j.failures = append(j.failures, o.check(c, j)...)
		}
	}
	return j.failures
}

// sharedFieldErrors renders each leaf field of a case object owned by two field managers that the spec did
// not declare.
func (c *Case) sharedFieldErrors(*judgement) []string {
	var out []string
	for _, o := range c.leftovers() {
		own, err := OwnershipOf(o)
		if err != nil {
			out = append(out, fmt.Sprintf("oracle %s: %s/%s: %v", SharedFields, o.GetObjectKind().GroupVersionKind().Kind, o.GetName(), err))
			continue
		}
		kind := o.GetObjectKind().GroupVersionKind().Kind
		shared := own.sharedFields()
		paths := make([]string, 0, len(shared))
		for p := range shared {
			if !c.fieldAllowed(c.sharedOK, kind, o.GetName(), ownerKinds(o), p) {
				paths = append(paths, p)
			}
		}
		sort.Strings(paths)
		for _, p := range paths {
			out = append(out, fmt.Sprintf("oracle %s: %s/%s field %s is owned by field managers %s (declare it with AllowSharedField if both may own it)", SharedFields, kind, o.GetName(), p, strings.Join(shared[p], " and ")))
		}
	}
	if len(out) > 0 {
		c.mark(fmt.Sprintf("oracle %s: %d fields owned by two field managers", SharedFields, len(out)))
	}
	return out
}

// convergenceErrors waits for the namespace to go quiet and checks that some controller reconciled in it.
// It runs only while the spec has not failed otherwise: its wait would only delay the report of the first
// failure.
func (c *Case) convergenceErrors(j *judgement) []string {
	if c.t.Failed() || len(j.failures) > 0 {
		return nil
	}
	if err := c.converged(); err != nil {
		first, _, _ := strings.Cut(err.Error(), "\n")
		c.mark(first)
		return []string{err.Error()}
	}
	j.settled = true
	return nil
}

// converged waits for the namespace to go quiet and checks that some controller reconciled in it.
func (c *Case) converged() error {
	ctx, cancel := context.WithTimeout(context.Background(), convergenceTimeout+time.Second)
	defer cancel()
	_, err := c.s.waitQuiescent(ctx, c.Namespace, c.Started, convergenceWindow, convergenceTimeout, StateOnly(), func(q *quietConfig) { q.requeues = true })
	if err == nil && len(c.Passes(PassFilter{})) == 0 {
		err = errors.New("no controller ever ran a reconcile pass in the namespace: is it admitted (see Unadmitted), are its kinds watched by a manager, did the spec create anything?")
	}
	if err != nil {
		return fmt.Errorf("oracle %s (opt out with a reason if the spec's operator may stay busy): %w", Convergence, err)
	}
	return nil
}

// endState reads the case's objects (the watched kinds) as the differential oracle compares them: "Kind/name"
// to flattened leaf fields, the namespace written as "<namespace>", objects made with generateName keyed
// "Kind/<generateName>*<i>" in the order of their content (their random suffixes differ from run to run).
func (c *Case) endState() map[string]map[string]string {
	out := map[string]map[string]string{}
	generated := map[string][]map[string]string{}
	for _, o := range c.leftovers() {
		fields := map[string]string{}
		for path, v := range flatten(o) {
			fields[path] = strings.ReplaceAll(v, c.Namespace, "<namespace>")
		}
		kind := o.GetObjectKind().GroupVersionKind().Kind
		if g := o.GetGenerateName(); g != "" {
			generated[kind+"/"+g+"*"] = append(generated[kind+"/"+g+"*"], fields)
			continue
		}
		out[kind+"/"+o.GetName()] = fields
	}
	for key, objs := range generated {
		sort.Slice(objs, func(i, j int) bool { return contentKey(objs[i]) < contentKey(objs[j]) })
		for i, f := range objs {
			out[fmt.Sprintf("%s%d", key, i)] = f
		}
	}
	return out
}

// contentKey renders fields without the volatile ones and the name, to order generated objects by content.
func contentKey(fields map[string]string) string {
	var parts []string
	for p, v := range fields {
		if !perturb.Volatile(p) {
			parts = append(parts, p+"="+v)
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, "\n")
}

// differentialErrors compares the case's end state with the unperturbed runs' of the same spec
// (ENSEMBLE_BASELINE) and renders the differences; none without a baseline for the spec (a case outside a
// spec, a suite node's, has none), and none (with a report entry) for a case that opted out of Convergence,
// whose end state is not a settled one. When the convergence oracle did not see the namespace settle (the
// spec or an oracle before it failed, so it did not wait, or it waited in vain), the failure says so first:
// the end state it compares may be one the operators were still changing.
func (c *Case) differentialErrors(j *judgement) []string {
	base := c.s.baselines[c.t.Name()]
	if len(base) == 0 || c.t.Name() == "" {
		return nil
	}
	if c.optedOut(Convergence) {
		// A case that need not settle has no end state to compare: what it holds depends on when the spec
		// ended, perturbed or not.
		c.report("differential", "not judged: the case opted out of "+string(Convergence)+", so its end state is not a settled one")
		return nil
	}
	var diff []string
	end := j.endState(c)
	for _, d := range perturb.Diff(base, end) {
		kind, name, _ := strings.Cut(d.Object, "/")
		// The object's owners as the perturbed run ended, or as an unperturbed run did when it is gone.
		owners := flatOwnerKinds(end[d.Object])
		for _, b := range base {
			owners = append(owners, flatOwnerKinds(b[d.Object])...)
		}
		if d.Path == "" || !c.fieldAllowed(c.differOK, kind, name, owners, d.Path) {
			diff = append(diff, d.String())
		}
	}
	if len(diff) == 0 {
		return nil
	}
	unsettled := ""
	switch {
	case j.settled:
	case j.specFailed:
		unsettled = "the spec failed before its end state settled; "
	default:
		unsettled = "an oracle failed before the end state was seen to settle; "
	}
	msg := fmt.Sprintf("oracle %s: %sthe end state differs from the unperturbed run's in %d fields:\n%s", Differential, unsettled, len(diff), indent(diff))
	first, _, _ := strings.Cut(msg, "\n")
	c.mark(first)
	return []string{msg}
}

// AllowDifference declares that the field path (e.g. "status.podRoles", in the dialect Change.Fields and
// OwnershipOf share) of the objects selected, or any field under it, may end differently under a
// perturbation: the spec's operator decides it by timing (which pod an election picks, say), so the
// unperturbed runs agreeing on it says nothing. The Differential oracle does not compare it; reason is shown
// in the spec's report when the oracle runs (ENSEMBLE_BASELINE). Without a kind, a path or a reason, or with
// a malformed path, the test fails. It matches objects and fields by the rules AllowSharedField does; an
// object's owners are those it ended with in the perturbed run, and in the unperturbed runs.
func (c *Case) AllowDifference(objects Objects, path, reason string) {
	c.t.Helper()
	if c.allowField("AllowDifference", &c.differOK, objects, path, reason, "why its end value may differ") && len(c.s.baselines) > 0 {
		c.report("difference allowed", fmt.Sprintf("%s %s: %s", objects, path, reason))
	}
}
