package suite

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// stepTimeout bounds how long a script step waits for the changes it permits. It never makes a step pass;
// it only decides how long a step that is going to fail takes to say so.
const stepTimeout = 30 * time.Second

// settleWindow is how long a step keeps watching after the last change it needs has arrived, so that one
// change too many fails the step that caused it. A straggler later than this lands in the next step (or in
// Finish) and fails there.
const settleWindow = 250 * time.Millisecond

// Permit is the changes a script step permits, built with Permits and Before: one or more objects, each
// with the type of change allowed, and an order between them. The zero Permit permits nothing.
type Permit struct {
	leaves []*permitLeaf
	// order holds pairs (a, b): the first change matched to leaf a comes before the first matched to b.
	order [][2]*permitLeaf
}

// permitLeaf is one object's permitted change.
type permitLeaf struct {
	typ        ChangeType
	kind, name string
	fields     []string
}

func (l *permitLeaf) String() string {
	s := fmt.Sprintf("%s %s/%s", l.typ, l.kind, l.name)
	if len(l.fields) > 0 {
		s += " (" + strings.Join(l.fields, ", ") + ")"
	}
	return s
}

// Permits permits one change of the object kind/name in a script step. Added and Deleted permit exactly one
// such change, which the step needs before it ends. Modified permits one or more updates (the number of
// status updates a progression takes is paced by other actors, so it is not counted), each changing only
// fields at or under the given paths (e.g. "status", "status.podRoles", "metadata.annotations"); the step
// needs at least one. Modified with no path permits a change of any field.
func Permits(typ ChangeType, kind, name string, fields ...string) Permit {
	return Permit{leaves: []*permitLeaf{{typ: typ, kind: kind, name: name, fields: fields}}}
}

// Before permits everything first and then permit, and requires, by resourceVersion (the order etcd made
// the changes in, not the order the watches delivered them), that the first change matched to each object
// of first comes before the first change matched to any object of then.
func Before(first, then Permit) Permit {
	p := Permit{leaves: append(append([]*permitLeaf(nil), first.leaves...), then.leaves...)}
	p.order = append(append(p.order, first.order...), then.order...)
	for _, a := range first.leaves {
		for _, b := range then.leaves {
			p.order = append(p.order, [2]*permitLeaf{a, b})
		}
	}
	return p
}

// All joins permits into one Permit, keeping the orders each holds, so that Before can order a group as a whole:
// Before(Permits(Added, "Shard", s), All(Permits(Added, "Pod", a), Permits(Added, "Pod", b))) orders the Shard's
// creation before each pod's and leaves the two pods unordered. All of nothing is the zero Permit.
func All(permits ...Permit) Permit {
	var p Permit
	for _, q := range permits {
		p.leaves = append(p.leaves, q.leaves...)
		p.order = append(p.order, q.order...)
	}
	return p
}

// Script is a closed-world sequence over a Case's namespace: each step does something and permits exact
// changes of the watched kinds; any other change in the namespace, from the step's start to the end of its
// settle window, fails it. The script's last step is followed by an explicit Finish. Make one with
// Case.Script; a script whose steps all held but that was never finished fails its spec at cleanup.
type Script struct {
	c      *Case
	name   string
	cursor int64
	// from is the API server's resourceVersion when the script began: a change at or below it was made
	// before, however late the stream delivers it, and is no step's.
	from uint64
	last []*permitLeaf
	// finished is set by Finish; failed holds a step error that no pin took (see Case.KnownDefect).
	finished bool
	failed   *scriptError
}

// scriptError is a step's verdict on the system under test.
type scriptError struct {
	sc    *Script
	msg   string
	taken bool
}

func (e *scriptError) Error() string { return e.msg }

// Script starts a closed-world script named name over the case's namespace: changes made before this call
// are outside it, even those the event stream delivers after it (the script starts at the resourceVersion
// a fresh list answers with, ordered after every write that returned before the call). A list that fails
// fails the test. The case's cleanup fails the test when the script was never finished (RequireFinish, or
// Finish in a pin body) and when a step's error was dropped instead of failing the spec or being returned
// from a KnownDefect check.
func (c *Case) Script(name string) *Script {
	c.t.Helper()
	sc := &Script{c: c, name: name, cursor: c.s.stream.lastSeq()}
	// The cursor is taken first: whatever the stream saw before it was made before the list below.
	from, err := c.s.revision(c.ctx)
	if err != nil {
		c.fatalf("suite: Script(%q): reading the API server's current resourceVersion, where the script begins: %v", name, err)
	}
	sc.from = from
	c.mu.Lock()
	c.scripts = append(c.scripts, sc)
	c.mu.Unlock()
	return sc
}

// RequireStep runs Step and fails the test (Fatalf) with its error.
func (sc *Script) RequireStep(name string, do func() error, permits ...Permit) {
	sc.c.t.Helper()
	if err := sc.Step(name, do, permits...); err != nil {
		sc.c.fatalf("%v", err)
	}
}

// Step runs do (nil for a step that only waits on the reaction to the previous one), then watches the
// namespace until every permitted change has arrived (at most 30 s) and for a settle window of 250 ms after.
// It returns an error when a change is not permitted (naming it, its fields outside the permitted paths,
// and what the step permits), when a permitted change is missing at the timeout, or when a Before order does
// not hold. The error is a verdict on the operator, for a KnownDefect check; a malformed step (a permit
// declared twice for one object and change type, a malformed field path, no permit at all), do's own error and an interrupted run
// fail the test instead, because they say nothing about the operator.
func (sc *Script) Step(name string, do func() error, permits ...Permit) error {
	sc.c.t.Helper()
	where := fmt.Sprintf("script %q step %q", sc.name, name)
	if sc.finished {
		sc.abort("suite: %s comes after the script's Finish: start another Case.Script", where)
		return nil
	}
	leaves, order, err := flattenPermits(permits)
	if err == nil {
		err = sc.c.s.watched(leaves)
	}
	if err != nil {
		sc.abort("suite: %s: %v", where, err)
		return nil
	}
	if do != nil {
		if err := do(); err != nil {
			sc.abort("suite: %s: the step's action failed: %v", where, err)
			return nil
		}
	}
	sc.last = leaves
	m := newStepMatch(leaves)
	deadline := time.Now().Add(stepTimeout)
	var settleEnd time.Time
	for {
		wake := sc.c.s.notify.wait()
		for _, ch := range sc.c.s.stream.after(sc.c.Namespace, sc.cursor) {
			sc.cursor = ch.Seq
			if !sc.own(ch) {
				continue
			}
			if err := m.take(ch); err != nil {
				return sc.fail(fmt.Sprintf("%s: %v\n  it permits:\n%s\n  seen in this step:\n%s", where, err, indent(leafLines(leaves)), indent(m.seenLines())))
			}
		}
		if err := sc.c.s.broken(); err != nil {
			sc.abort("suite: %s: %v", where, err)
			return nil
		}
		now := time.Now()
		if settleEnd.IsZero() && m.satisfied() {
			if err := m.checkOrder(order); err != nil {
				return sc.fail(fmt.Sprintf("%s: %v\n  seen in this step:\n%s", where, err, indent(m.seenLines())))
			}
			settleEnd = now.Add(settleWindow)
		}
		if !settleEnd.IsZero() && !now.Before(settleEnd) {
			return nil
		}
		if settleEnd.IsZero() && now.After(deadline) {
			return sc.fail(fmt.Sprintf("%s: still missing after %s:\n%s\n  seen in this step:\n%s", where, stepTimeout, indent(m.missing()), indent(m.seenLines())))
		}
		until := deadline
		if !settleEnd.IsZero() {
			until = settleEnd
		}
		timer := time.NewTimer(time.Until(until) + time.Millisecond)
		select {
		case <-wake:
		case <-timer.C:
		case <-sc.c.ctx.Done():
			timer.Stop()
			sc.abort("suite: %s: the test ended while the step waited: %v", where, sc.c.ctx.Err())
			return nil
		}
		timer.Stop()
	}
}

// RequireFinish runs Finish and fails the test (Fatalf) with its error.
func (sc *Script) RequireFinish(within time.Duration) {
	sc.c.t.Helper()
	if err := sc.Finish(within); err != nil {
		sc.c.fatalf("%v", err)
	}
}

// Finish ends the script: for within after the last step (use at least a second unless the last step waits
// on something slower), the only changes allowed are further updates the last step's Modified permits
// allow; any other change is returned as an error naming it. A Finish that returns an error still finishes
// the script.
func (sc *Script) Finish(within time.Duration) error {
	sc.c.t.Helper()
	sc.finished = true
	where := fmt.Sprintf("script %q after its last step", sc.name)
	end := time.Now().Add(within)
	for {
		wake := sc.c.s.notify.wait()
		for _, ch := range sc.c.s.stream.after(sc.c.Namespace, sc.cursor) {
			sc.cursor = ch.Seq
			if sc.own(ch) && !repeatAllowed(sc.last, ch) {
				return sc.fail(fmt.Sprintf("%s: %s arrived within %s and no step permits it: every change a script sees must be permitted by the step that caused it", where, ch, within))
			}
		}
		if !time.Now().Before(end) {
			return nil
		}
		timer := time.NewTimer(time.Until(end) + time.Millisecond)
		select {
		case <-wake:
		case <-timer.C:
		case <-sc.c.ctx.Done():
		}
		timer.Stop()
		if sc.c.ctx.Err() != nil {
			return nil
		}
	}
}

// abort fails the test with a harness verdict and ends the script, so the cleanup does not also call it
// unfinished.
func (sc *Script) abort(format string, args ...any) {
	sc.c.t.Helper()
	sc.c.mu.Lock()
	sc.finished = true
	sc.c.mu.Unlock()
	sc.c.fatalf(format, args...)
}

// watched checks that every permitted kind is one the event stream watches (Options.WatchKinds): a change
// of any other kind never reaches a script.
func (s *Suite) watched(leaves []*permitLeaf) error {
	kinds := map[string]bool{}
	for _, k := range s.watchKinds {
		if gvk, err := apiutil.GVKForObject(k, s.scheme); err == nil {
			kinds[gvk.Kind] = true
		}
	}
	for _, l := range leaves {
		if !kinds[l.kind] {
			names := make([]string, 0, len(kinds))
			for k := range kinds {
				names = append(names, k)
			}
			sort.Strings(names)
			return fmt.Errorf("%s: kind %q is not watched, so the step would never see it: add it to Options.WatchKinds, or fix its spelling (watched: %s)", l, l.kind, strings.Join(names, ", "))
		}
	}
	return nil
}

// fail records a step's verdict, marks it on the case's timeline and returns it.
func (sc *Script) fail(msg string) error {
	e := &scriptError{sc: sc, msg: msg}
	sc.c.mu.Lock()
	if sc.failed == nil {
		sc.failed = e
	}
	sc.c.mu.Unlock()
	return e
}

// takeScriptErrors marks as taken every script error that err wraps: a pin returned it as its evidence.
func (c *Case) takeScriptErrors(err error) {
	var se *scriptError
	if errors.As(err, &se) {
		c.mu.Lock()
		se.taken = true
		c.mu.Unlock()
	}
}

// scriptErrors is the cleanup's complaint about the case's scripts: one never finished (and no step
// failed), or a step error nobody failed the spec with nor returned from a pin.
func (c *Case) scriptErrors() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, sc := range c.scripts {
		switch {
		case sc.failed != nil && !sc.failed.taken && !c.t.Failed():
			out = append(out, fmt.Sprintf("suite: a step error of script %q was dropped: fail the spec with it (RequireStep) or return it from a KnownDefect check: %s", sc.name, sc.failed.msg))
		case sc.failed == nil && !sc.finished:
			var left []Change
			for _, ch := range sc.c.s.stream.after(c.Namespace, sc.cursor) {
				if sc.own(ch) {
					left = append(left, ch)
				}
			}
			msg := fmt.Sprintf("suite: script %q was never finished: end it with RequireFinish (or Finish in a pin body); what happened after its last step went unexamined", sc.name)
			if len(left) > 0 {
				msg += fmt.Sprintf(", %d changes such as %s", len(left), left[0])
			}
			out = append(out, msg)
		}
	}
	return out
}

// own reports whether ch was made after the script began (a resourceVersion that is not a number counts as
// made after).
func (sc *Script) own(ch Change) bool {
	rv, err := strconv.ParseUint(ch.ResourceVersion, 10, 64)
	return err != nil || rv > sc.from
}

// revision is the API server's current resourceVersion, from a list of one namespace (a list without a
// resourceVersion is read at the latest one). Errors: the API server's, or a resourceVersion that is not a
// number.
func (s *Suite) revision(ctx context.Context) (uint64, error) {
	l := &corev1.NamespaceList{}
	if err := s.Client.List(ctx, l, client.Limit(1)); err != nil {
		return 0, err
	}
	rv, err := strconv.ParseUint(l.ResourceVersion, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("the list's resourceVersion %q is not a number", l.ResourceVersion)
	}
	return rv, nil
}

// flattenPermits joins a step's permits and checks that each object and change type is permitted once.
func flattenPermits(permits []Permit) ([]*permitLeaf, [][2]*permitLeaf, error) {
	var leaves []*permitLeaf
	var order [][2]*permitLeaf
	seen := map[string]bool{}
	for _, p := range permits {
		for _, l := range p.leaves {
			switch l.typ {
			case Added, Modified, Deleted:
			default:
				return nil, nil, fmt.Errorf("Permits(%q, %s, %s): the change type must be suite.Added, suite.Modified or suite.Deleted", l.typ, l.kind, l.name)
			}
			if l.kind == "" || l.name == "" {
				return nil, nil, fmt.Errorf("Permits(%s, %q, %q): give the object's kind and name", l.typ, l.kind, l.name)
			}
			for _, f := range l.fields {
				if err := checkFieldPath(f); err != nil {
					return nil, nil, fmt.Errorf("Permits(%s, %q, %q, ...): %v", l.typ, l.kind, l.name, err)
				}
			}
			k := string(l.typ) + " " + l.kind + "/" + l.name
			if seen[k] {
				return nil, nil, fmt.Errorf("%s is permitted twice: permit each object's change once, with all its field paths", k)
			}
			seen[k] = true
			leaves = append(leaves, l)
		}
		order = append(order, p.order...)
	}
	if len(leaves) == 0 {
		return nil, nil, errors.New("it permits no change: a step that expects nothing to happen is Finish")
	}
	return leaves, order, nil
}

// stepMatch assigns a step's observed changes to its permits. Each change matches at most one permit (one
// per object and change type), so the assignment does not depend on the order the watches delivered them.
type stepMatch struct {
	leaves []*permitLeaf
	first  map[*permitLeaf]Change
	count  map[*permitLeaf]int
	seen   []Change
}

func newStepMatch(leaves []*permitLeaf) *stepMatch {
	return &stepMatch{leaves: leaves, first: map[*permitLeaf]Change{}, count: map[*permitLeaf]int{}}
}

// take matches one change; an error says why it is not permitted.
func (m *stepMatch) take(ch Change) error {
	m.seen = append(m.seen, ch)
	for _, l := range m.leaves {
		if l.typ != ch.Type || l.kind != ch.Kind || l.name != ch.Name {
			continue
		}
		if l.typ != Modified && m.count[l] > 0 {
			return fmt.Errorf("%s happened a second time: %s", l, ch)
		}
		if outside := fieldsOutside(l.fields, ch.Fields); len(outside) > 0 {
			return fmt.Errorf("%s changed fields it does not permit (%s): %s", l, strings.Join(outside, ", "), ch)
		}
		if m.count[l] == 0 {
			m.first[l] = ch
		}
		m.count[l]++
		return nil
	}
	return fmt.Errorf("a change no permit covers: %s", ch)
}

func (m *stepMatch) satisfied() bool {
	for _, l := range m.leaves {
		if m.count[l] == 0 {
			return false
		}
	}
	return true
}

func (m *stepMatch) missing() []string {
	var out []string
	for _, l := range m.leaves {
		if m.count[l] == 0 {
			out = append(out, l.String())
		}
	}
	return out
}

// checkOrder checks each Before pair by resourceVersion of the first matched changes.
func (m *stepMatch) checkOrder(order [][2]*permitLeaf) error {
	for _, o := range order {
		a, b := m.first[o[0]], m.first[o[1]]
		ra, errA := strconv.ParseUint(a.ResourceVersion, 10, 64)
		rb, errB := strconv.ParseUint(b.ResourceVersion, 10, 64)
		if errA != nil || errB != nil {
			return fmt.Errorf("cannot order %s and %s: resourceVersions %q and %q are not numbers", o[0], o[1], a.ResourceVersion, b.ResourceVersion)
		}
		if ra >= rb {
			return fmt.Errorf("order violated: %s must come before %s, but etcd made them at resourceVersions %d and %d:\n    %s\n    %s", o[0], o[1], ra, rb, a, b)
		}
	}
	return nil
}

func (m *stepMatch) seenLines() []string {
	s := append([]Change(nil), m.seen...)
	sort.SliceStable(s, func(i, j int) bool { return s[i].Seq < s[j].Seq })
	return lastLines(s, 40, Change.String)
}

// repeatAllowed reports whether ch is a further update a Modified permit of the last step allows.
func repeatAllowed(last []*permitLeaf, ch Change) bool {
	for _, l := range last {
		if l.typ == Modified && ch.Type == Modified && l.kind == ch.Kind && l.name == ch.Name && len(fieldsOutside(l.fields, ch.Fields)) == 0 {
			return true
		}
	}
	return false
}

// fieldsOutside lists the changed field paths not at or under one of the permitted paths (none permitted:
// any field is).
func fieldsOutside(permitted []string, changed []FieldChange) []string {
	if len(permitted) == 0 {
		return nil
	}
	var out []string
	for _, fc := range changed {
		ok := false
		for _, p := range permitted {
			if under(fc.Path, p) {
				ok = true
				break
			}
		}
		if !ok {
			out = append(out, fc.Path)
		}
	}
	return out
}

func leafLines(leaves []*permitLeaf) []string {
	var out []string
	for _, l := range leaves {
		out = append(out, l.String())
	}
	return out
}
