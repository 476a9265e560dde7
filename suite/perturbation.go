package suite

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ensembletest/ensemble/suite/perturb"
)

// quietRelease is how long a case's namespace must be otherwise quiet before a held point with no count
// (perturb.Point.For 0) is released, and quietReleaseMax how long a release waits for that at most: a
// manager that keeps retrying against its stale view keeps the namespace busy, and the point must end.
const (
	quietRelease    = 300 * time.Millisecond
	quietReleaseMax = 5 * time.Second
)

// plan is the perturbation of one case's namespace: its points with their counts of writes, and what they
// set off that has not ended yet.
type plan struct {
	mu    sync.Mutex
	ns    string
	armed []*armed
	held  []*firing
	fired []string
	// firedAt is when each of fired happened, for the case's timeline.
	firedAt []time.Time
	errs    []string
	closed  bool
	// pending are restarts and releases still running; the case's cleanup waits for them.
	pending sync.WaitGroup
}

// armed is one point of a plan and the number of writes or changes it has counted; primed is set when a
// fault point's change trigger fired and its writer's next write is still to be refused.
type armed struct {
	p perturb.Point
	// in is p in its case's namespace (perturb.Point.In), whose Object is the API server's name: what
	// writes and watch events are matched against.
	in     perturb.Point
	n      int
	primed bool
	// places numbers the writer's objects of the point's kind when its Object is "Kind/*k"
	// (perturb.Point.PlaceOf).
	places perturb.Places
}

// changeTrigger is a point with a change trigger. The watches of its writer's manager count the changes of
// its object (as the suite's event stream counts them: a creation, a deletion, an update of a field besides
// resourceVersion, managedFields and timestamps), and the point fires on the Change-th before that manager's
// informers receive it: stale and coalesce hold the kind's stream from that change on, the change included, a fault refuses the manager's next write,
// restart fences the manager before it could act on the change, down and slow begin. Counting in the
// manager's own watch, not in the stream, makes the firing exact relative to what the manager saw. Guarded
// by Suite.chmu.
type changeTrigger struct {
	s    *Suite
	a    *armed
	pl   *plan
	key  heldKey
	n    int
	last map[string]string
	rvs  map[string]bool
	done bool
}

// holds reports whether the trigger's mode holds the watch stream of the object's kind (stale, coalesce).
func (ch *changeTrigger) holds() bool {
	return ch.a.p.Mode == perturb.Stale || ch.a.p.Mode == perturb.Coalesce
}

func (ch *changeTrigger) coalesce() bool { return ch.a.p.Mode == perturb.Coalesce }

// firing is a held point that fired: left writes remain before it is released (0: released when quiet, or
// after the point's Lag); ended is closed once it is released.
type firing struct {
	p       perturb.Point
	left    int
	once    sync.Once
	release func()
	ended   chan struct{}
}

// fired is what perturbBefore tells the write: the error of a fault point that refuses it, a restart to
// carry out once the write is done, and the places the write took as a new object without a name (a create
// with generateName), which its answer names.
type fired struct {
	err     error
	restart *perturb.Point
	unnamed []unnamed
}

// unnamed is the place a write without a name took among the objects a's point numbers (perturb.Places).
type unnamed struct {
	a     *armed
	place int
}

// Perturb sets point p on the case from now on: its writer's writes in the case's namespace are counted from
// the call, and the point fires as perturb.Point says. The case's cleanup ends every point (releasing what
// is held) before the oracles judge the end state. A point perturb.Point.Validate refuses, or one that names
// an external system the suite does not have (Options.Externals), fails the test; one that never fired and
// whose writer names no manager, controller or recorded writer fails it at the case's cleanup, naming the
// writers there are.
func (c *Case) Perturb(p perturb.Point) {
	c.t.Helper()
	if err := c.s.checkPoint(p); err != nil {
		c.t.Fatalf("suite: Perturb(%s): %v", p, err)
	}
	c.s.arm(c.s.planFor(c.Namespace, true), p)
}

// Release ends every held point of the case now (stale and coalesced views are delivered, external systems
// come back); its points still fire on later writes.
func (c *Case) Release() {
	if pl := c.s.planFor(c.Namespace, false); pl != nil {
		pl.releaseAll()
	}
}

// checkPoint reports whether the suite can carry out p: perturb.Point.Validate, then its external system.
func (s *Suite) checkPoint(p perturb.Point) error {
	if err := p.Validate(); err != nil {
		return err
	}
	if p.Mode == perturb.Down || p.Mode == perturb.Slow {
		_, err := s.external(p.System)
		return err
	}
	return nil
}

// planFor returns namespace ns's plan, making one when create is set; nil when there is none.
func (s *Suite) planFor(ns string, create bool) *plan {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	pl := s.plans[ns]
	if pl == nil && create {
		pl = &plan{ns: ns}
		if s.plans == nil {
			s.plans = map[string]*plan{}
		}
		s.plans[ns] = pl
	}
	return pl
}

// arm adds p to the plan; a point with a change trigger is counted by its manager's watches
// (changeTrigger).
func (s *Suite) arm(pl *plan, p perturb.Point) {
	a := &armed{p: p, in: p.In(pl.ns)}
	pl.mu.Lock()
	pl.armed = append(pl.armed, a)
	pl.mu.Unlock()
	if p.Trigger.OnChange() {
		kind, name, _ := strings.Cut(a.in.Object, "/")
		s.chmu.Lock()
		s.changeTriggers = append(s.changeTriggers, &changeTrigger{s: s, a: a, pl: pl, key: heldKey{kind, s.objectNamespace(kind, pl.ns), name}, rvs: map[string]bool{}})
		s.chmu.Unlock()
	}
}

// changeAt counts ev, read by a watch of manager's cache for object k, towards the change triggers armed on
// k for that manager, and returns the one it fires (nil when none); it fires before the informer gets ev.
// An event counts once whichever of the manager's informers reads it first, and only when it is a change
// (see changeTrigger).
func (s *Suite) changeAt(manager string, k heldKey, ev watch.Event) *changeTrigger {
	s.chmu.Lock()
	defer s.chmu.Unlock()
	if len(s.changeTriggers) == 0 {
		return nil
	}
	obj, ok := ev.Object.(client.Object)
	if !ok {
		return nil
	}
	var fired *changeTrigger
	for _, ch := range s.changeTriggers {
		if ch.done || ch.key != k || ch.a.p.Manager() != manager || ch.rvs[obj.GetResourceVersion()] {
			continue
		}
		ch.rvs[obj.GetResourceVersion()] = true
		flat := flatten(obj)
		changed := ev.Type == watch.Added || ev.Type == watch.Deleted || ch.last == nil || len(diffFlat(ch.last, flat)) > 0
		ch.last = flat
		if !changed {
			continue
		}
		if ch.n++; ch.a.p.Fires(ch.n) && fired == nil {
			ch.done = true
			fired = ch
		}
	}
	return fired
}

// fire carries the trigger's point out in the case's plan (fire); kind is the group and kind of the
// informer whose watch read the change, and release ends the hold that watch began for stale and coalesce
// (nil for the other modes). A plan already closed releases it at once.
func (ch *changeTrigger) fire(kind schema.GroupKind, release func()) {
	pl, p := ch.pl, ch.a.p
	pl.mu.Lock()
	if pl.closed {
		pl.mu.Unlock()
		if release != nil {
			release()
		}
		return
	}
	what := fmt.Sprintf("%s at %s/%s (its change %d, as %s's watch delivered it", p, ch.key.kind, ch.key.name, ch.n, p.Manager())
	_, restart := ch.s.fire(pl, ch.a, what, p.Manager(), kind, nil, release)
	pl.mu.Unlock()
	if restart {
		ch.s.restart(pl, p.Manager(), p)
	}
}

// fire carries out a, whose point p fired, in plan pl (called with pl.mu held): the one place that
// dispatches on p's mode. what says where it fired, for the case's report. manager is the writer's manager
// and kind the object's group and kind, whose watch stream a held mode holds in that manager. On a write trigger (w set) a fault refuses w (refuse is set) and a
// restart waits for w to be done; on a change trigger a fault refuses the writer's next write and the
// restart is due at once. Either way restart asks the caller to restart manager once pl.mu is released.
// release is the hold a change trigger's watch already began (stale, coalesce), nil otherwise.
func (s *Suite) fire(pl *plan, a *armed, what, manager string, kind schema.GroupKind, w *Write, release func()) (refuse, restart bool) {
	p := a.p
	if w != nil && w.Point == "" {
		w.Point = p.String()
	}
	switch {
	case p.Mode.Fault() && w != nil:
		pl.note(what + ")")
		return true, false
	case p.Mode.Fault():
		pl.note(what + "; its next write is refused)")
		a.primed = true
	case p.Mode == perturb.Restart && w != nil:
		pl.note(what + ")")
		return false, true
	case p.Mode == perturb.Restart:
		pl.note(what + "; restarted before it could act on it)")
		return false, true
	default:
		if w == nil {
			pl.note(what + "; held from then on)")
		} else {
			pl.note(what + ")")
		}
		if f := s.startHeld(pl, p, manager, kind, release); f != nil {
			pl.held = append(pl.held, f)
		}
	}
	return false, false
}

// perturbBefore counts w against the points of its namespace before it is sent. It returns the error of a
// fault point that fired (the write is then not sent) and a restart to carry out after the write, and it
// starts the held points that fired (their hold begins before the write, so the write's own change is held
// too). It also counts w towards the release of held points that wait for a number of writes.
func (s *Suite) perturbBefore(w *Write, gr schema.GroupResource) fired {
	pl := s.planFor(w.scope, false)
	if pl == nil || w.scope == "" {
		return fired{}
	}
	pl.mu.Lock()
	if pl.closed {
		pl.mu.Unlock()
		return fired{}
	}
	var due []*firing
	for _, f := range pl.held {
		if f.left > 0 {
			if f.left--; f.left == 0 {
				due = append(due, f)
			}
		}
	}
	var out fired
	writer := w.writer()
	for _, a := range pl.armed {
		if w.Manager == caseManager {
			continue
		}
		if a.primed && a.p.Refuses(writer) {
			a.primed = false
			pl.note(fmt.Sprintf("%s at %s/%s (%s by %s, its first write after the change)", a.p, w.Kind, w.Name, w.Verb, writer))
			if w.Point == "" {
				w.Point = a.p.String()
			}
			if out.err == nil {
				out.err = a.p.Error(gr, w.Name)
			}
			continue
		}
		place := a.in.PlaceOf(&a.places, writer, string(w.Verb), w.Kind, w.Name)
		if place > 0 && w.Name == "" {
			out.unnamed = append(out.unnamed, unnamed{a, place})
		}
		if !a.in.Counts(writer, w.Kind, w.Name, place) {
			continue
		}
		if a.n++; !a.p.Fires(a.n) {
			continue
		}
		p := a.p
		what := fmt.Sprintf("%s at %s/%s (%s by %s", p, w.Kind, w.Name, w.Verb, writer)
		refuse, restart := s.fire(pl, a, what, w.Manager, schema.GroupKind{Group: gr.Group, Kind: w.Kind}, w, nil)
		if refuse && out.err == nil {
			out.err = p.Error(gr, w.Name)
		}
		if restart {
			out.restart = &p
		}
	}
	pl.mu.Unlock()
	for _, f := range due {
		pl.release(f)
	}
	return out
}

// perturbAfter carries out the restart a point asked for once the write it fired on is done (a refused
// write restarts nothing: the process would have crashed after a write that did not happen), and gives the
// places a create without a name took the name its answer carries, so the object's later writes count at
// that place.
func (s *Suite) perturbAfter(w Write, f fired) {
	if f.restart == nil && len(f.unnamed) == 0 {
		return
	}
	pl := s.planFor(w.scope, false)
	if pl == nil {
		return
	}
	if len(f.unnamed) > 0 && w.Err == nil && w.Name != "" {
		pl.mu.Lock()
		for _, u := range f.unnamed {
			u.a.places.Name(w.Kind, w.Name, u.place)
		}
		pl.mu.Unlock()
	}
	if f.restart == nil || w.Err != nil {
		return
	}
	s.restart(pl, w.Manager, *f.restart)
}

// restart fences manager (its later writes are refused, naming p) and stops and starts it again from its
// ManagerOptions in the background; the case's cleanup waits for it. Nothing happens once the plan closed.
func (s *Suite) restart(pl *plan, manager string, p perturb.Point) {
	s.mu.Lock()
	m := s.managers[manager]
	s.mu.Unlock()
	if m == nil {
		pl.addErr(fmt.Sprintf("point %s: manager %s is not running", p, manager))
		return
	}
	pl.mu.Lock()
	if pl.closed {
		pl.mu.Unlock()
		return
	}
	pl.pending.Add(1)
	pl.mu.Unlock()
	m.wm.markStopped()
	m.wm.fence.Store(&p)
	go func() {
		defer pl.pending.Done()
		if err := m.stopInstance(time.Now().Add(m.stopTimeout()), m.stopTimeout()); err != nil {
			pl.addErr(fmt.Sprintf("point %s: stopping manager %s: %v", p, m.Name, err))
		}
		m.rmu.Lock()
		stopped := m.stopped
		m.rmu.Unlock()
		if stopped {
			// Its owner stopped it meanwhile: a crashed process that nobody restarts.
			return
		}
		next, err := s.StartManager(m.opts)
		if err != nil {
			pl.addErr(fmt.Sprintf("point %s: starting manager %s again: %v", p, m.Name, err))
			return
		}
		if !m.restarted(next) {
			return
		}
		// The restart is done once the fresh instance's controllers run (their sources synced, the objects
		// they found queued), so the case's verdict is not taken while it has yet to start. An instance under
		// leader election may rightly be a follower whose controllers never start.
		if next.opts.LeaderElection {
			return
		}
		select {
		case <-next.wm.workersRunning():
		case <-time.After(s.startTimeout):
			pl.addErr(fmt.Sprintf("point %s: manager %s started again, but its controllers' workers did not start within %s", p, m.Name, s.startTimeout))
		}
	}()
}

// startHeld begins a held point p that fired on an object of kind in the plan's namespace, for manager
// (called with pl.mu held): stale and coalesce hold manager's watch stream of kind (holds.hold). It returns
// its firing; nil when it could not begin (the reason is kept for the case's cleanup). release, when set, is
// the hold a change trigger's watch already began.
func (s *Suite) startHeld(pl *plan, p perturb.Point, manager string, kind schema.GroupKind, release func()) *firing {
	f := &firing{p: p, left: p.For, release: release, ended: make(chan struct{})}
	switch {
	case release != nil:
	case p.Mode == perturb.Stale || p.Mode == perturb.Coalesce:
		s.mu.Lock()
		m := s.managers[manager]
		s.mu.Unlock()
		if m == nil {
			pl.errs = append(pl.errs, fmt.Sprintf("point %s: manager %s is not running", p, manager))
			return nil
		}
		f.release = m.holds.hold(kind, pl.ns, p.Mode == perturb.Coalesce)
	case p.Mode == perturb.Down || p.Mode == perturb.Slow:
		ext, err := s.external(p.System)
		if err != nil {
			pl.errs = append(pl.errs, fmt.Sprintf("point %s: %v", p, err))
			return nil
		}
		if p.Mode == perturb.Down {
			ext.Down(pl.ns, true)
			f.release = func() { ext.Down(pl.ns, false) }
		} else {
			ext.Slow(pl.ns, p.Latency)
			f.release = func() { ext.Slow(pl.ns, 0) }
		}
	}
	switch {
	case p.Lag > 0:
		pl.releaseAfter(f, p.Lag)
	case p.For == 0:
		s.releaseWhenQuiet(pl, f)
	}
	return f
}

// releaseAfter releases f once lag has passed, or sooner when something else releases it (called with pl.mu
// held, the plan not closed).
func (pl *plan) releaseAfter(f *firing, lag time.Duration) {
	pl.pending.Add(1)
	goCase(pl.ns, func() {
		defer pl.pending.Done()
		t := time.NewTimer(lag)
		defer t.Stop()
		select {
		case <-t.C:
			pl.release(f)
		case <-f.ended:
		}
	})
}

// releaseWhenQuiet releases f once the plan's namespace is quiet for quietRelease, or after
// quietReleaseMax (called with pl.mu held, the plan not closed).
func (s *Suite) releaseWhenQuiet(pl *plan, f *firing) {
	pl.pending.Add(1)
	goCase(pl.ns, func() {
		defer pl.pending.Done()
		ctx, cancel := context.WithTimeout(context.Background(), quietReleaseMax)
		defer cancel()
		// Quiet or not within quietReleaseMax, the point ends: a lasting hold would only stall the case.
		_, _ = s.waitQuiescent(ctx, pl.ns, time.Now(), quietRelease, quietReleaseMax, func(c *quietConfig) { c.firstQuiet = true })
		pl.release(f)
	})
}

// release ends one firing (once).
func (pl *plan) release(f *firing) {
	f.once.Do(func() {
		if f.release != nil {
			f.release()
		}
		close(f.ended)
	})
}

// releaseUntilQuiet ends the case's held firings that last until the namespace is quiet (neither For nor
// Lag), and waits for those with a Lag to end on their own: a lagging view is part of what the quiescence
// check after it judges, not something the check cuts short.
//
// It returns when it released the last of them (zero when it released none), from which the check's window
// counts: what was held reaches the managers' caches then, and their reaction belongs in the window.
func (c *Case) releaseUntilQuiet(ctx context.Context) time.Time {
	pl := c.s.planFor(c.Namespace, false)
	if pl == nil {
		return time.Time{}
	}
	pl.mu.Lock()
	var due, lagging []*firing
	for _, f := range pl.held {
		select {
		case <-f.ended:
			continue // released already
		default:
		}
		switch {
		case f.p.Lag > 0:
			lagging = append(lagging, f)
		case f.p.For == 0:
			due = append(due, f)
		}
	}
	pl.mu.Unlock()
	if len(due)+len(lagging) == 0 {
		return time.Time{}
	}
	for _, f := range due {
		pl.release(f)
	}
	for _, f := range lagging {
		select {
		case <-f.ended:
		case <-ctx.Done():
		}
	}
	return time.Now()
}

// releaseAll ends every firing of the plan.
func (pl *plan) releaseAll() {
	pl.mu.Lock()
	held := append([]*firing(nil), pl.held...)
	pl.mu.Unlock()
	for _, f := range held {
		pl.release(f)
	}
}

// note keeps where a point fired, now (called with pl.mu held).
func (pl *plan) note(what string) {
	pl.fired = append(pl.fired, what)
	pl.firedAt = append(pl.firedAt, time.Now())
}

func (pl *plan) addErr(e string) {
	pl.mu.Lock()
	pl.errs = append(pl.errs, e)
	pl.mu.Unlock()
}

// endPerturbation closes the case's plan at its cleanup: no point fires any more, everything held is
// released and the restarts under way finish; each firing becomes a mark on the case's timeline. It returns what fired and the points' own failures (a
// manager that could not be restarted).
func (c *Case) endPerturbation() (points, firedAt, errs []string) {
	pl := c.s.planFor(c.Namespace, false)
	if pl == nil {
		return nil, nil, nil
	}
	pl.mu.Lock()
	pl.closed = true
	pl.mu.Unlock()
	c.s.chmu.Lock()
	c.s.changeTriggers = slices.DeleteFunc(c.s.changeTriggers, func(ch *changeTrigger) bool { return ch.pl == pl })
	c.s.chmu.Unlock()
	pl.releaseAll()
	pl.pending.Wait()
	c.s.pmu.Lock()
	delete(c.s.plans, c.Namespace)
	c.s.pmu.Unlock()
	pl.mu.Lock()
	defer pl.mu.Unlock()
	for _, a := range pl.armed {
		points = append(points, a.p.String())
	}
	for i, what := range pl.fired {
		c.markPoint(pl.firedAt[i], what)
	}
	return points, pl.fired, pl.errs
}

// reportPoints adds a report entry (shown without -v) for a case that had points: where each fired, or that
// it never did (no write of its writer, on its object, reached its trigger). It returns one failure line per
// point that never fired and whose writer names nothing that exists (a typo in ENSEMBLE_PERTURB or
// Case.Perturb): no manager, no controller of one, no writer the recorder saw in the case's namespace.
func (c *Case) reportPoints(points, firedAt []string) []string {
	if len(points) == 0 {
		return nil
	}
	lines := append([]string(nil), firedAt...)
	var failures []string
	var writers []string
	for _, p := range points {
		if slices.ContainsFunc(firedAt, func(f string) bool { return strings.HasPrefix(f, p+" at ") }) {
			continue
		}
		pt, err := perturb.Parse(p)
		if err == nil {
			if writers == nil {
				writers = c.s.writers(c.Namespace)
			}
			if !slices.ContainsFunc(writers, pt.Names) {
				failures = append(failures, fmt.Sprintf("suite: point %s names writer %q, which is no manager, controller or writer of this suite: name one of %s", p, pt.Writer, strings.Join(writers, ", ")))
				continue
			}
		}
		if err == nil && pt.Trigger.OnChange() {
			lines = append(lines, p+" never fired: its object did not change that often as the writer's manager's cache watches it (does that manager watch the kind?)")
			continue
		}
		lines = append(lines, p+" never fired: no write of its writer reached its trigger (is the writer manager or manager/controller as the writes name it?)")
	}
	c.report("perturbation", strings.Join(lines, "\n"))
	return failures
}

// writers lists, sorted, the writers a point may name in namespace ns: each manager, each manager/controller
// of the controllers it wrapped, and each writer of a write recorded in ns (the spec's own case/spec and
// webhooks' admissions and conversions and the writers read from the audit log aside).
func (s *Suite) writers(ns string) []string {
	set := map[string]bool{}
	s.mu.Lock()
	for name, m := range s.managers {
		set[name] = true
		for ctrl := range m.wm.wrapped {
			set[name+"/"+ctrl] = true
		}
	}
	s.mu.Unlock()
	for _, w := range s.rec.writes(ns, WriteFilter{IncludeRejected: true}) {
		// An admission, a conversion or a write read from the audit log never passes a point.
		if w.Manager != caseManager && !w.answer() && !w.audited {
			set[w.writer()] = true
		}
	}
	out := make([]string, 0, len(set))
	for w := range set {
		out = append(out, w)
	}
	sort.Strings(out)
	return out
}

// groupResource names kind's resource for an injected error, through the client's REST mapper (the lowered
// kind with an "s" when the mapper does not know it).
func groupResource(c client.Client, kind string) schema.GroupResource {
	if c != nil && c.RESTMapper() != nil {
		for gvk := range c.Scheme().AllKnownTypes() {
			if gvk.Kind != kind {
				continue
			}
			if m, err := c.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version); err == nil {
				return m.Resource.GroupResource()
			}
		}
	}
	return schema.GroupResource{Resource: strings.ToLower(kind) + "s"}
}
