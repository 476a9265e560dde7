package suite

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
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
	mu     sync.Mutex
	ns     string
	armed  []*armed
	held   []*firing
	fired  []string
	errs   []string
	closed bool
	// pending are restarts and releases still running; the case's cleanup waits for them.
	pending sync.WaitGroup
}

// armed is one point of a plan and the number of writes it has counted.
type armed struct {
	p perturb.Point
	n int
}

// firing is a held point that fired: left writes remain before it is released (0: released when quiet).
type firing struct {
	p       perturb.Point
	left    int
	once    sync.Once
	release func()
}

// fired is what perturbBefore tells the write it let through: a restart to carry out once the write is done.
type fired struct {
	err     error
	restart *perturb.Point
}

// Perturb sets point p on the case from now on: its writer's writes in the case's namespace are counted from
// the call, and the point fires as perturb.Point says. The case's cleanup ends every point (releasing what
// is held) before the oracles judge the end state. A point that names an external system the suite does not
// have (Options.Externals) fails the test.
func (c *Case) Perturb(p perturb.Point) {
	c.t.Helper()
	if err := c.s.checkPoint(p); err != nil {
		c.t.Fatalf("suite: Perturb(%s): %v", p, err)
	}
	c.s.planFor(c.Namespace, true).arm(p)
}

// Release ends every held point of the case now (stale and coalesced views are delivered, external systems
// come back); its points still fire on later writes.
func (c *Case) Release() {
	if pl := c.s.planFor(c.Namespace, false); pl != nil {
		pl.releaseAll()
	}
}

// checkPoint reports whether the suite can carry out p.
func (s *Suite) checkPoint(p perturb.Point) error {
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

func (pl *plan) arm(p perturb.Point) {
	pl.mu.Lock()
	pl.armed = append(pl.armed, &armed{p: p})
	pl.mu.Unlock()
}

// perturbBefore counts w against the points of its namespace before it is sent. It returns the error of a
// fault point that fired (the write is then not sent) and a restart to carry out after the write, and it
// starts the held points that fired (their hold begins before the write, so the write's own change is held
// too). It also counts w towards the release of held points that wait for a number of writes.
func (s *Suite) perturbBefore(w *Write, c client.Client) fired {
	pl := s.planFor(w.Namespace, false)
	if pl == nil || w.Namespace == "" {
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
		if w.Manager == caseManager || !a.p.Counts(writer, w.Kind, w.Name) {
			continue
		}
		if a.n++; !a.p.Fires(a.n) {
			continue
		}
		p := a.p
		pl.fired = append(pl.fired, fmt.Sprintf("%s at %s/%s (%s by %s)", p, w.Kind, w.Name, w.Verb, writer))
		if w.Point == "" {
			w.Point = p.String()
		}
		switch {
		case p.Mode.Fault():
			if out.err == nil {
				out.err = p.Error(groupResource(c, w.Kind), w.Name)
			}
		case p.Mode == perturb.Restart:
			out.restart = &p
		default:
			if f := s.startHeld(pl, p, w); f != nil {
				pl.held = append(pl.held, f)
			}
		}
	}
	pl.mu.Unlock()
	for _, f := range due {
		pl.release(f)
	}
	return out
}

// perturbAfter carries out the restart a point asked for once the write it fired on is done (a refused
// write restarts nothing: the process would have crashed after a write that did not happen).
func (s *Suite) perturbAfter(w Write, f fired) {
	if f.restart == nil || w.Err != nil {
		return
	}
	pl := s.planFor(w.Namespace, false)
	s.mu.Lock()
	m := s.managers[w.Manager]
	s.mu.Unlock()
	if m == nil || pl == nil {
		return
	}
	m.wm.fence.Store(f.restart)
	pl.pending.Add(1)
	go func() {
		defer pl.pending.Done()
		if err := m.Stop(); err != nil {
			pl.addErr(fmt.Sprintf("point %s: stopping manager %s: %v", f.restart, m.Name, err))
		}
		if _, err := s.StartManager(m.opts); err != nil {
			pl.addErr(fmt.Sprintf("point %s: starting manager %s again: %v", f.restart, m.Name, err))
		}
	}()
}

// startHeld begins a held point p that fired on w (called with pl.mu held) and returns its firing; nil
// when it could not begin (the reason is kept for the case's cleanup).
func (s *Suite) startHeld(pl *plan, p perturb.Point, w *Write) *firing {
	f := &firing{p: p, left: p.For}
	switch p.Mode {
	case perturb.Stale, perturb.Coalesce:
		s.mu.Lock()
		m := s.managers[w.Manager]
		s.mu.Unlock()
		if m == nil {
			pl.errs = append(pl.errs, fmt.Sprintf("point %s: manager %s is not running", p, w.Manager))
			return nil
		}
		f.release = m.holds.hold(w.Kind, w.Namespace, w.Name, p.Mode == perturb.Coalesce)
	case perturb.Down, perturb.Slow:
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
	if p.For == 0 {
		pl.pending.Add(1)
		go func() {
			defer pl.pending.Done()
			ctx, cancel := context.WithTimeout(context.Background(), quietReleaseMax)
			defer cancel()
			// Quiet or not within quietReleaseMax, the point ends: a lasting hold would only stall the case.
			_, _ = s.waitQuiescent(ctx, pl.ns, time.Now(), quietRelease, quietReleaseMax)
			pl.release(f)
		}()
	}
	return f
}

// release ends one firing (once).
func (pl *plan) release(f *firing) {
	f.once.Do(func() {
		if f.release != nil {
			f.release()
		}
	})
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

func (pl *plan) addErr(e string) {
	pl.mu.Lock()
	pl.errs = append(pl.errs, e)
	pl.mu.Unlock()
}

// endPerturbation closes the case's plan at its cleanup: no point fires any more, everything held is
// released and the restarts under way finish. It returns what fired and the points' own failures (a
// manager that could not be restarted).
func (c *Case) endPerturbation() (points, firedAt, errs []string) {
	pl := c.s.planFor(c.Namespace, false)
	if pl == nil {
		return nil, nil, nil
	}
	pl.mu.Lock()
	pl.closed = true
	pl.mu.Unlock()
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
	return points, pl.fired, pl.errs
}

// reportPoints adds a report entry (shown without -v) for a case that had points: where each fired, or that
// it never did (no write of its writer, on its object, reached its trigger; check the writer's name).
func (c *Case) reportPoints(points, firedAt []string) {
	if len(points) == 0 {
		return
	}
	lines := append([]string(nil), firedAt...)
	for _, p := range points {
		if !slices.ContainsFunc(firedAt, func(f string) bool { return strings.HasPrefix(f, p+" at ") }) {
			lines = append(lines, p+" never fired: no write of its writer reached its trigger (is the writer manager or manager/controller as the writes name it?)")
		}
	}
	c.report("perturbation", strings.Join(lines, "\n"))
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
