package explore

import (
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/onsi/ginkgo/v2/types"

	"github.com/ensembletest/ensemble/internal/ginkgoreport"
	"github.com/ensembletest/ensemble/internal/textout"
	"github.com/ensembletest/ensemble/suite/perturb"
)

// defaultModes are -modes' default: every mode, external outages and latency included, which the pruning
// makes affordable (see prune; before it the default was conflict,timeout,restart,stale,coalesce).
const defaultModes = "all"

// defaultLag is -lag's default: longer than the about 10 s that operators commonly wait for their own cache
// to show what they wrote (cluster-api's WaitForCacheToBeUpToDate gives up after that), as a busy API
// server's watch can lag in production.
const defaultLag = 15 * time.Second

// slowLatency is the delay of the slow points the enumeration makes.
const slowLatency = 200 * time.Millisecond

// parseModes reads -modes: a comma list of perturb.Modes, or "all" for every one. Errors: an empty list, an
// unknown mode (naming the ones there are).
func parseModes(s string) ([]perturb.Mode, error) {
	if strings.TrimSpace(s) == "all" {
		return slices.Clone(perturb.Modes), nil
	}
	var out []perturb.Mode
	for _, f := range strings.Split(s, ",") {
		m := perturb.Mode(strings.TrimSpace(f))
		if m == "" {
			continue
		}
		if !slices.Contains(perturb.Modes, m) {
			return nil, fmt.Errorf("-modes (make's MODES) names %q, which is no mode: use some of %s, or all", m, modeNames())
		}
		if !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("-modes (make's MODES) is empty: use some of %s, or all", modeNames())
	}
	return out, nil
}

func modeNames() string {
	var s []string
	for _, m := range perturb.Modes {
		s = append(s, string(m))
	}
	return strings.Join(s, ",")
}

// Budget bounds how many enumerated points run: Points of them (0: none), or as many as start within Time
// of the first (Time set).
type Budget struct {
	Points int
	Time   time.Duration
}

// String renders the budget as parseBudget reads it.
func (b Budget) String() string {
	if b.Time > 0 {
		return b.Time.String()
	}
	return strconv.Itoa(b.Points)
}

// parseBudget reads -budget: a number of points ("40"; 0 runs the unperturbed runs and the enumeration
// only, for shards' -from) or a positive duration ("20m"). Errors: anything else.
func parseBudget(s string) (Budget, error) {
	s = strings.TrimSpace(s)
	if n, err := strconv.Atoi(s); err == nil && n >= 0 {
		return Budget{Points: n}, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return Budget{Time: d}, nil
	}
	return Budget{}, fmt.Errorf("-budget (make's BUDGET) %q is neither a positive number of points (40) nor a duration (20m); 0 runs the unperturbed runs only", s)
}

// SpecPoint is one point set on one spec's run.
type SpecPoint struct {
	Spec  string
	Point perturb.Point
	// Writes is how many writes the point's writer made on its object in the unperturbed run (the largest
	// perturb.Nth the enumeration made for the pair), or for a change trigger how many changes its object had
	// (the largest perturb.Change); 0 for a point given with -points.
	Writes int
	// Index is the point's place among all the points the run takes (all its shards'), from 0.
	Index int
}

// trigger is p's count: its n-th write or its n-th change (0 for the other triggers).
func trigger(p perturb.Point) int {
	if k := p.Trigger.Kind; k == perturb.NthWrite || k == perturb.NthChange {
		return p.Trigger.N
	}
	return 0
}

// Enumeration is every point the unperturbed records allow, in enumeration order: specs by name, writers and
// their objects in the order of their first write, then modes in -modes' order (down and slow once per
// external system), then the write's number k = 1..n; then each spec's change triggers (see enumerate).
type Enumeration struct {
	Points []SpecPoint
	// Unparsable are the (writer, object) pairs whose points Parse would not read back (a writer with more
	// than one '/', an object that is not Kind/name), as "spec: writer on object"; they get no point.
	Unparsable []string
	// Unstable are the pairs on an object the second unperturbed run did not write (its name differs from
	// run to run, as generateName's do), as "spec: writer on object"; a point naming it could not fire in
	// another run, so they get none. Such an object gets points by its place among its writer's objects of
	// its kind instead ("Kind/*k", see renamedPoints) where both runs have an object named anew there.
	Unstable []string
	// NoWrites are the specs whose records hold no write by an operator or fake: nothing to perturb.
	NoWrites []string
}

// pair is a writer's writes on one object in one spec.
type pair struct {
	writer, object string
	n              int
}

// enumerate makes the points of the records' writes, skipping the spec's own ("case/..."). The records of
// one spec (one per case it made) are merged: a pair's n is its largest count in any of them, and the
// externals are their union. second are the records of another unperturbed run (nil: none): a pair gets
// points only when that run wrote its object too, k up to the smaller of the two runs' counts.
//
// Then the change triggers, for the modes among -modes that act on a manager's view (restart, stale,
// coalesce): each object whose changes both runs saw (objects sorted by name, k = 1..the smaller count),
// for each manager that wrote in the spec (in the order of its first write), k up to the changes that
// manager's watch could deliver (a change trigger fires in that watch; Record.Seen): restart at the
// object's k-th change, and stale and coalesce from it.
func enumerate(records, second []perturb.Record, modes []perturb.Mode) Enumeration {
	var e Enumeration
	for _, spec := range specNames(records) {
		pairs, externals := pairsOf(records, spec)
		var again []pair
		if second != nil {
			again, _ = pairsOf(second, spec)
		}
		// Writers in the order of their first write, each writer's objects likewise.
		var writers []string
		for _, p := range pairs {
			if !slices.Contains(writers, p.writer) {
				writers = append(writers, p.writer)
			}
		}
		if len(pairs) == 0 {
			e.NoWrites = append(e.NoWrites, spec)
		}
		for _, w := range writers {
			for _, p := range pairs {
				if p.writer != w {
					continue
				}
				probe := perturb.Point{Mode: perturb.Conflict, Writer: p.writer, Object: p.object, Trigger: perturb.Nth(1)}
				if _, err := perturb.Parse(probe.String()); err != nil {
					e.Unparsable = append(e.Unparsable, fmt.Sprintf("%s: %s on %s", spec, p.writer, p.object))
					continue
				}
				if second != nil {
					i := slices.IndexFunc(again, func(q pair) bool { return q.writer == p.writer && q.object == p.object })
					if i < 0 {
						e.Unstable = append(e.Unstable, fmt.Sprintf("%s: %s on %s", spec, p.writer, p.object))
						continue
					}
					p.n = min(p.n, again[i].n)
				}
				for _, m := range modes {
					for _, sys := range systems(m, externals) {
						for k := 1; k <= p.n; k++ {
							pt := perturb.Point{Mode: m, System: sys, Writer: p.writer, Object: p.object, Trigger: perturb.Nth(k)}
							if m == perturb.Slow {
								pt.Latency = slowLatency
							}
							e.Points = append(e.Points, SpecPoint{Spec: spec, Point: pt, Writes: p.n})
						}
					}
				}
			}
		}
		if second != nil {
			e.renamedPoints(spec, records, second, writers, modes, externals)
			// A manager named anew each run (a spec's own instance with a random suffix) could not be named by
			// a point that fires in another run.
			writers = slices.DeleteFunc(writers, func(w string) bool {
				return !slices.ContainsFunc(again, func(q pair) bool { return managerOf(q.writer) == managerOf(w) })
			})
		}
		e.changePoints(spec, records, second, writers, modes)
	}
	return e
}

// addLagged adds, after the points, a copy of each stale point held for lag instead of until the namespace
// is quiet (perturb.Point.Lag); none when lag is 0.
func (e *Enumeration) addLagged(lag time.Duration) {
	if lag <= 0 {
		return
	}
	for _, sp := range e.Points {
		if sp.Point.Mode == perturb.Stale && sp.Point.For == 0 && sp.Point.Lag == 0 {
			sp.Point.Lag = lag
			e.Points = append(e.Points, sp)
		}
	}
}

// renamedPoints adds spec's points on the writes of objects named anew each run (an operator's random
// suffix, as cluster-api's MachineSets and Machines and Kueue's Workloads have), which no point can name: a
// point names such an object by its place, "Kind/*k", the writer's k-th object of that kind in the order
// of its first write to each, as the harness numbers them (perturb.Places), and counts the writes on it, so
// it fires on the same object's same write in every run however the writer's other writes interleave. An
// object gets points where in both unperturbed runs (the first record of the spec in each) the writer's
// k-th object of the kind was one the other run never wrote (an object both runs wrote gets points by its
// name), k up to the smaller of the two runs' counts of the writer's writes on it. Writers as in
// enumerate, then each writer's objects in the order of its first write, then the modes, systems and k.
// Events get none: a record of what happened, named anew each time, which no controller reads back.
func (e *Enumeration) renamedPoints(spec string, records, second []perturb.Record, writers []string, modes []perturb.Mode, externals []string) {
	first, again := firstRecord(records, spec), firstRecord(second, spec)
	if first == nil || again == nil {
		return
	}
	ownA, ownB := objectsOf(first), objectsOf(again)
	for _, w := range writers {
		a, b := placesOf(first, w), placesOf(again, w)
		for _, oa := range a {
			kind := kindOfObject(oa.object)
			i := slices.IndexFunc(b, func(ob placed) bool { return kindOfObject(ob.object) == kind && ob.place == oa.place })
			if i < 0 || kind == "Event" || oa.object == kind+"/" || b[i].object == kind+"/" || ownB[oa.object] || ownA[b[i].object] {
				continue
			}
			n := min(oa.n, b[i].n)
			obj := kind + "/*" + strconv.Itoa(oa.place)
			probe := perturb.Point{Mode: perturb.Conflict, Writer: w, Object: obj, Trigger: perturb.Nth(1)}
			if _, err := perturb.Parse(probe.String()); err != nil {
				e.Unparsable = append(e.Unparsable, fmt.Sprintf("%s: %s on %s", spec, w, obj))
				continue
			}
			for _, m := range modes {
				for _, sys := range systems(m, externals) {
					for k := 1; k <= n; k++ {
						pt := perturb.Point{Mode: m, System: sys, Writer: w, Object: obj, Trigger: perturb.Nth(k)}
						if m == perturb.Slow {
							pt.Latency = slowLatency
						}
						e.Points = append(e.Points, SpecPoint{Spec: spec, Point: pt, Writes: n})
					}
				}
			}
		}
	}
}

// placed is one object a writer wrote, its place among the writer's objects of its kind (from 1), and how
// many of the writer's writes were on it.
type placed struct {
	object string
	place  int
	n      int
}

// placesOf lists the objects of the writes in r that a point whose Writer is writer counts (its own, and
// its controllers' when it names a manager: perturb.Point.Names), in the order of the first write to each,
// each with its place as perturb.Point.PlaceOf numbers it for that point; a create with no name ("Kind/", a
// refused create with generateName) is an object of its own, another write with no name on none.
func placesOf(r *perturb.Record, writer string) []placed {
	var places perturb.Places
	var out []placed
	for _, w := range r.Writes {
		kind, name, _ := strings.Cut(w.Object, "/")
		// A point on kind's objects by place numbers this write as one whose Object is kind/*1 does.
		place := perturb.Point{Writer: writer, Object: kind + "/*1", Trigger: perturb.Nth(1)}.PlaceOf(&places, w.Writer, w.Verb, kind, name)
		if place == 0 {
			continue
		}
		i := slices.IndexFunc(out, func(p placed) bool { return kindOfObject(p.object) == kind && p.place == place })
		if i < 0 {
			out = append(out, placed{object: w.Object, place: place})
			i = len(out) - 1
		}
		out[i].n++
	}
	return out
}

// firstRecord is the first of records whose spec is spec; nil when none is.
func firstRecord(records []perturb.Record, spec string) *perturb.Record {
	for i := range records {
		if records[i].Spec == spec {
			return &records[i]
		}
	}
	return nil
}

// objectsOf is the set of objects r's writes wrote, by anyone.
func objectsOf(r *perturb.Record) map[string]bool {
	out := map[string]bool{}
	for _, w := range r.Writes {
		out[w.Object] = true
	}
	return out
}

// kindOfObject is the Kind of a "Kind/name" object.
func kindOfObject(obj string) string {
	k, _, _ := strings.Cut(obj, "/")
	return k
}

// changePoints adds spec's change-triggered points (see enumerate) for the managers of writers (those that
// wrote in both unperturbed runs, when there are two).
func (e *Enumeration) changePoints(spec string, records, second []perturb.Record, writers []string, modes []perturb.Mode) {
	changes, seen := changesOf(records, spec)
	var again map[string]int
	var seenAgain map[string]map[string]int
	if second != nil {
		again, seenAgain = changesOf(second, spec)
	}
	var managers []string
	for _, w := range writers {
		if m := managerOf(w); !slices.Contains(managers, m) {
			managers = append(managers, m)
		}
	}
	objects := make([]string, 0, len(changes))
	for obj := range changes {
		objects = append(objects, obj)
	}
	slices.Sort(objects)
	for _, obj := range objects {
		n := changes[obj]
		if second != nil {
			m, ok := again[obj]
			if !ok {
				e.Unstable = append(e.Unstable, fmt.Sprintf("%s: the changes of %s", spec, obj))
				continue
			}
			n = min(n, m)
		}
		for _, mgr := range managers {
			// The manager's watch fires its change triggers: only the changes it could deliver count.
			k := min(n, seen[mgr][obj])
			if second != nil {
				k = min(k, seenAgain[mgr][obj])
			}
			if k == 0 {
				continue
			}
			for _, m := range modes {
				if m != perturb.Restart && m != perturb.Stale && m != perturb.Coalesce {
					continue
				}
				probe := perturb.Point{Mode: m, Writer: mgr, Object: obj, Trigger: perturb.Change(1)}
				if _, err := perturb.Parse(probe.String()); err != nil {
					e.Unparsable = append(e.Unparsable, fmt.Sprintf("%s: %s on the changes of %s", spec, mgr, obj))
					continue
				}
				for j := 1; j <= k; j++ {
					pt := probe
					pt.Trigger = perturb.Change(j)
					e.Points = append(e.Points, SpecPoint{Spec: spec, Point: pt, Writes: k})
				}
			}
		}
	}
}

// managerOf is the manager part of a writer ("multigres" of "multigres/multigres-shard"), as a point names it.
func managerOf(writer string) string { return perturb.Point{Writer: writer}.Manager() }

// changesOf merges the change counts of spec's records (each object's largest) and, by manager, the counts
// its watch could deliver (likewise).
func changesOf(records []perturb.Record, spec string) (changes map[string]int, seen map[string]map[string]int) {
	changes, seen = map[string]int{}, map[string]map[string]int{}
	for _, r := range records {
		if r.Spec != spec {
			continue
		}
		for obj, n := range r.Changes {
			changes[obj] = max(changes[obj], n)
		}
		for m, objs := range r.Seen {
			if seen[m] == nil {
				seen[m] = map[string]int{}
			}
			for obj, n := range objs {
				seen[m][obj] = max(seen[m][obj], n)
			}
		}
	}
	return changes, seen
}

// specNames are the records' specs, each once, sorted.
func specNames(records []perturb.Record) []string {
	var out []string
	for _, r := range records {
		out = append(out, r.Spec)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// pairsOf lists the (writer, object) pairs of spec's records in the order of their first write, each with
// its largest count in one record, and the records' external systems.
func pairsOf(records []perturb.Record, spec string) (pairs []pair, externals []string) {
	for _, r := range records {
		if r.Spec != spec {
			continue
		}
		count := map[[2]string]int{}
		for _, w := range r.Writes {
			if strings.HasPrefix(w.Writer, "case/") || w.Writer == "case" || w.Object == "" {
				continue
			}
			k := [2]string{w.Writer, w.Object}
			count[k]++
			i := slices.IndexFunc(pairs, func(p pair) bool { return p.writer == w.Writer && p.object == w.Object })
			if i < 0 {
				pairs = append(pairs, pair{writer: w.Writer, object: w.Object})
				i = len(pairs) - 1
			}
			pairs[i].n = max(pairs[i].n, count[k])
		}
		for _, x := range r.Externals {
			if !slices.Contains(externals, x) {
				externals = append(externals, x)
			}
		}
	}
	return pairs, externals
}

// systems are the System values of mode m's points: each external system for down and slow (none when the
// suite has none), the empty one for the other modes.
func systems(m perturb.Mode, externals []string) []string {
	if m == perturb.Down || m == perturb.Slow {
		return externals
	}
	return []string{""}
}

// modeKey is a point's mode as the sampling spreads it: down and slow once per external system, a mode on
// a change trigger apart from the same mode on a write ("stale^"), a lagged one apart from one held until
// quiet ("stale+lag").
func modeKey(p perturb.Point) string {
	k := string(p.Mode)
	if p.System != "" {
		k += "(" + p.System + ")"
	}
	if p.Trigger.OnChange() {
		k += "^"
	}
	if p.Lag > 0 {
		k += "+lag"
	}
	return k
}

// sampler hands out an enumeration's points in the order a budget takes them: each next point is the one
// whose spec has run least so far, then whose mode has run least in the whole run, then whose writer in
// that spec, whose mode for that writer, whose mode in that spec, whose object for that writer; then the k
// the pair prefers (1, its last write n, then the middles: n/2, n/4, 3n/4, ...); ties go to enumeration
// order. A small budget so covers every spec, and across the specs every mode, before it covers any of
// them twice; within a spec every writer and mode; and a writer tries every mode before it tries one again.
type sampler struct {
	points []SpecPoint
	// keys[i] are the group ids of points[i] at each level of the order; rank[i] is its k's rank.
	keys [][nLevels]int
	rank []int
	// uses[level][id] is how many picked points are in group id of level.
	uses [nLevels][]int
	left []int // indices of the points not yet picked, in enumeration order
}

const nLevels = 6

func newSampler(points []SpecPoint) *sampler {
	s := &sampler{points: points, keys: make([][nLevels]int, len(points)), rank: make([]int, len(points))}
	ids := [nLevels]map[string]int{}
	for l := range ids {
		ids[l] = map[string]int{}
	}
	prefs := map[int]map[int]int{}
	for i, sp := range points {
		p := sp.Point
		names := [nLevels]string{
			sp.Spec,
			modeKey(p),
			sp.Spec + "\x00" + p.Writer,
			sp.Spec + "\x00" + p.Writer + "\x00" + modeKey(p),
			sp.Spec + "\x00\x00" + modeKey(p),
			sp.Spec + "\x00" + p.Writer + "\x00\x00" + p.Object,
		}
		for l, name := range names {
			id, ok := ids[l][name]
			if !ok {
				id = len(ids[l])
				ids[l][name] = id
				s.uses[l] = append(s.uses[l], 0)
			}
			s.keys[i][l] = id
		}
		k := trigger(p)
		n := max(sp.Writes, k)
		if prefs[n] == nil {
			prefs[n] = preference(n)
		}
		s.rank[i] = prefs[n][k]
		s.left = append(s.left, i)
	}
	return s
}

// next returns the next point, and false when every point has been handed out.
func (s *sampler) next() (SpecPoint, bool) {
	if len(s.left) == 0 {
		return SpecPoint{}, false
	}
	best := 0
	for j := 1; j < len(s.left); j++ {
		if s.less(s.left[j], s.left[best]) {
			best = j
		}
	}
	i := s.left[best]
	s.left = slices.Delete(s.left, best, best+1)
	for l := range s.uses {
		s.uses[l][s.keys[i][l]]++
	}
	return s.points[i], true
}

// specs is how many specs the points are of.
func (s *sampler) specs() int {
	return len(s.uses[0])
}

// less says point a comes before point b (a strict order: ties end in enumeration order).
func (s *sampler) less(a, b int) bool {
	for l := 0; l < nLevels; l++ {
		if ua, ub := s.uses[l][s.keys[a][l]], s.uses[l][s.keys[b][l]]; ua != ub {
			return ua < ub
		}
	}
	if s.rank[a] != s.rank[b] {
		return s.rank[a] < s.rank[b]
	}
	return a < b
}

// preference maps each k in 1..n to its rank in the order a pair's writes are tried: 1, n, then the middle
// of each gap in turn, wider gaps first (n=9: 1, 9, 5, 3, 7, 2, 4, 6, 8).
func preference(n int) map[int]int {
	order := []int{1}
	if n > 1 {
		order = append(order, n)
	}
	gaps := [][2]int{{1, n}}
	for len(gaps) > 0 {
		g := gaps[0]
		gaps = gaps[1:]
		mid := (g[0] + g[1]) / 2
		if mid <= g[0] || mid >= g[1] {
			continue
		}
		order = append(order, mid)
		gaps = append(gaps, [2]int{g[0], mid}, [2]int{mid, g[1]})
	}
	rank := make(map[int]int, len(order))
	for i, k := range order {
		rank[k] = i
	}
	return rank
}

// The verdicts of one run of a point.
const (
	// Pass: the spec passed its assertions and the oracles, the differential one included.
	Pass = "pass"
	// Fail: the spec or one of its oracles failed.
	Fail = "fail"
	// NotReached: the point never fired (the writer made fewer counted writes in this run).
	NotReached = "not reached"
	// Error: the run could not be judged (no report, or no record of the spec).
	Error = "error"
)

// Outcome is what one run of a point on a spec came to.
type Outcome struct {
	Verdict string
	// Failure is the failure's first line, or why the run could not be judged; empty for a pass. When the
	// spec failed on its own before its case's cleanup (perturb.Record.SpecFailed: an assertion of its
	// body), it is that failure (the Ginkgo report's); else the record's first cleanup failure (an oracle's,
	// an invariant's), else the Ginkgo report's failure message.
	Failure string `json:",omitempty"`
	// Difference is what the table shows: Failure when the spec failed on its own (the oracles after it
	// judged an end state that never settled), else the first field the differential oracle names
	// ("Kind/name path: want -> got"), else Failure.
	Difference string `json:",omitempty"`
	// Differential is the first field the differential oracle names whenever it failed (Difference's, unless
	// the spec failed on its own first), else empty.
	Differential string `json:",omitempty"`
	// Others are the first lines of the run's other failures, the spec's own and its oracles', each once:
	// a spec that failed its own assertion and then an oracle in its cleanup has both.
	Others []string `json:",omitempty"`
	// Fired names where the point fired, as the record says.
	Fired []string `json:",omitempty"`
	// Timeline is the timeline.html the harness wrote for the failing spec, as its log names it.
	Timeline string `json:",omitempty"`
	// Suite is the first failure of a suite node in the run ("[AfterSuite] ..."), which is not the spec's.
	Suite string `json:",omitempty"`
}

// differentialPrefix starts the differential oracle's failure.
const differentialPrefix = "oracle differential:"

// timelineLine finds the timeline a case's failure log names.
var timelineLine = regexp.MustCompile(`(\S+timeline\.html)\b`)

// judge reads the verdict of a run of spec from the records the run wrote and its Ginkgo report (nil with
// reportErr when it wrote none). Several records of the spec (several cases) are taken together. The
// verdict is the spec's own: its It node and its cases' records. A suite node that failed in the run (a
// suite-level case's cleanup, the AfterSuite) is named in Suite, not charged to the spec, unless the spec
// never ran.
func judge(spec string, records []perturb.Record, reports []types.Report, reportErr error) Outcome {
	if reportErr != nil {
		return Outcome{Verdict: Error, Failure: reportErr.Error(), Difference: reportErr.Error()}
	}
	var (
		o                                 Outcome
		recorded, ran, failed, specFailed bool
		recordFails, itFails              []string // the spec's failure texts: its records' and its It node's
	)
	for _, r := range records {
		if r.Spec != spec {
			continue
		}
		recorded = true
		failed = failed || r.Failed || len(r.Failures) > 0
		specFailed = specFailed || r.SpecFailed
		o.Fired = append(o.Fired, r.Fired...)
		recordFails = append(recordFails, r.Failures...)
	}
	for _, rep := range reports {
		for _, sr := range rep.SpecReports {
			it := sr.LeafNodeType == types.NodeTypeIt
			if it && ginkgoreport.Name(sr) != spec {
				continue
			}
			ran = ran || it && !sr.State.Is(types.SpecStateSkipped|types.SpecStatePending)
			if !sr.Failed() {
				continue
			}
			msg := sr.Failure.Message
			if msg == "" {
				msg = sr.State.String()
			}
			if !it {
				if o.Suite == "" {
					o.Suite = ginkgoreport.Name(sr) + " " + firstLine(msg)
				}
				continue
			}
			failed = true
			itFails = append(itFails, msg)
			for _, af := range sr.AdditionalFailures {
				itFails = append(itFails, af.Failure.Message)
			}
			if m := timelineLine.FindStringSubmatch(sr.CapturedGinkgoWriterOutput + "\n" + sr.CapturedStdOutErr); m != nil && o.Timeline == "" {
				o.Timeline = m[1]
			}
		}
		for _, reason := range rep.SpecialSuiteFailureReasons {
			if o.Suite == "" {
				o.Suite = "suite: " + reason
			}
		}
	}
	// A spec that failed on its own failed first: its report's failure is that one (a cleanup's failures
	// after it are additional ones), and the oracles after it judged an end state that never settled.
	specFailed = specFailed && len(itFails) > 0
	first := ""
	switch {
	case specFailed:
		first = firstLine(itFails[0])
	case len(recordFails) > 0:
		first = firstLine(recordFails[0])
	case len(itFails) > 0:
		first = firstLine(itFails[0])
	}
	switch {
	case !ran && !recorded:
		o.Verdict, o.Failure = Error, "the spec did not run (no spec of the report has its name)"
		if o.Suite != "" {
			o.Failure += ": " + o.Suite
		}
	case !recorded && !failed:
		o.Verdict, o.Failure = Error, "the spec passed but wrote no record (ENSEMBLE_EXPLORE): it makes no suite.Case"
	case recorded && len(o.Fired) == 0:
		o.Verdict, o.Failure = NotReached, first
	case failed:
		o.Verdict, o.Failure = Fail, first
		if o.Failure == "" {
			o.Failure = "failed without a message"
		}
	default:
		o.Verdict = Pass
	}
	if o.Failure != "" {
		o.Differential = differentialField(append(itFails, recordFails...))
		o.Difference = o.Differential
		if specFailed || o.Difference == "" {
			o.Difference = o.Failure
		}
		for _, t := range append(itFails, recordFails...) {
			if l := firstLine(t); l != "" && l != o.Failure && !slices.Contains(o.Others, l) {
				o.Others = append(o.Others, l)
			}
		}
	}
	return o
}

// differentialField is the first line after the differential oracle's "oracle differential: ..." line in
// texts (the line's own rest when nothing follows it), else empty.
func differentialField(texts []string) string {
	rest := ""
	for _, t := range texts {
		lines := strings.Split(t, "\n")
		for i, l := range lines {
			l = strings.TrimSpace(l)
			if !strings.HasPrefix(l, differentialPrefix) {
				continue
			}
			for _, next := range lines[i+1:] {
				if next = strings.TrimSpace(next); next != "" {
					return next
				}
			}
			if rest == "" {
				rest = strings.TrimSpace(strings.TrimPrefix(l, differentialPrefix))
			}
		}
	}
	return rest
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(l)
}

// specFocus is the Ginkgo focus regexp that selects exactly spec in the suite described desc: Ginkgo
// matches a focus against the suite's description and the spec's full text joined by a space. A literal
// '$' is written \x24, so make, which expands '$' in a variable's value, passes the regexp on unchanged.
func specFocus(desc, spec string) string {
	return "^" + strings.ReplaceAll(regexp.QuoteMeta(desc+" "+spec), `\$`, `\x24`) + "$"
}

// shellQuote quotes s for a POSIX shell: in single quotes, each single quote of s written as a quote that
// closes them, a backslash-escaped quote and a quote that opens them again.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// defaultSuite is -suite's default, as cleanSuite writes it.
const defaultSuite = "."

// makeSuite is the suite make explore runs when SUITE is not given, as cleanSuite writes it.
const makeSuite = "scenarios"

// goRun is how a module that requires ensemble runs the command.
const goRun = "go run github.com/ensembletest/ensemble/cmd/ensemble"

// cleanSuite writes a -suite directory as the rerun command names it: relative, without "./" or a trailing
// slash ("." for the current directory).
func cleanSuite(dir string) string {
	s := strings.TrimPrefix(strings.TrimSuffix(strings.ReplaceAll(dir, `\`, "/"), "/"), "./")
	if s == "" {
		return "."
	}
	return s
}

// rerun is the one command that runs exactly point on spec again: its unperturbed baselines, then the point.
// With viaMake (-make, which this repository's Makefile passes) it is a make explore line (FOCUS, POINTS,
// SUITE unless the scenarios); else the command as any module runs it (go run ... explore -focus -points,
// -suite unless ".").
func rerun(suite, desc, spec, point string, viaMake bool) string {
	s := cleanSuite(suite)
	if viaMake {
		cmd := "make explore FOCUS=" + shellQuote(specFocus(desc, spec)) + " POINTS=" + shellQuote(point)
		if s != makeSuite {
			cmd += " SUITE=" + shellQuote(s)
		}
		return cmd
	}
	cmd := goRun + " explore"
	if s != defaultSuite {
		cmd += " -suite " + shellQuote(s)
	}
	return cmd + " -focus " + shellQuote(specFocus(desc, spec)) + " -points " + shellQuote(point)
}

// Row is one point's line of the result: the point on a spec, its runs (-repeat of them) and their verdict.
type Row struct {
	// Index is the point's place in the whole run (all its shards), from 0.
	Index int
	Spec  string
	Point string
	Mode  perturb.Mode
	// Outcome is the first run's, or the first failing run's when the runs disagree.
	Outcome
	// Verdicts are every run's verdict, in order; Agree says they are all the same.
	Verdicts []string
	Agree    bool
	// Took is each run's wall time. Dirs is each run's directory (its test process's: records/, artifacts/,
	// suite.json and output.log; "" for a run that never ran), in order: -repeat's runs of a point may run
	// in several processes. Dir is the directory of the run whose Outcome the row shows.
	Took []Duration
	Dirs []string `json:",omitempty"`
	Dir  string
	// Elapsed is the wall time from the command's start (its shard's, after -merge) to the point's verdict.
	Elapsed Duration
	// Command reruns exactly this point.
	Command string
}

// Duration is a time.Duration that JSON writes as a string such as "12.3s".
type Duration time.Duration

// MarshalText writes the duration rounded to 100 ms.
func (d Duration) MarshalText() ([]byte, error) {
	return []byte(time.Duration(d).Round(100 * time.Millisecond).String()), nil
}

// UnmarshalText reads what MarshalText writes, for -merge. Errors: time.ParseDuration's.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	*d = Duration(v)
	return err
}

// combine makes a point's row from its runs' outcomes (at least one).
func combine(sp SpecPoint, outs []Outcome) Row {
	row := Row{Index: sp.Index, Spec: sp.Spec, Point: sp.Point.String(), Mode: sp.Point.Mode, Outcome: outs[shown(outs)], Agree: true}
	for _, o := range outs {
		row.Verdicts = append(row.Verdicts, o.Verdict)
		row.Agree = row.Agree && o.Verdict == outs[0].Verdict
	}
	return row
}

// shown is the run whose outcome a row shows (at least one): the first, or the first failing one when the
// verdicts differ.
func shown(outs []Outcome) int {
	differ := slices.ContainsFunc(outs, func(o Outcome) bool { return o.Verdict != outs[0].Verdict })
	if k := slices.IndexFunc(outs, func(o Outcome) bool { return o.Verdict == Fail }); differ && k >= 0 {
		return k
	}
	return 0
}

// verdictCell is the table's verdict of a row: the verdict, or every run's when they disagree.
func verdictCell(r Row) string {
	if r.Agree {
		if len(r.Verdicts) > 1 {
			return fmt.Sprintf("%s (%d/%d)", r.Verdict, len(r.Verdicts), len(r.Verdicts))
		}
		return r.Verdict
	}
	return "differ: " + strings.Join(r.Verdicts, ", ")
}

// differenceWidth is how many characters of a first difference the table shows; explore.json has it whole.
const differenceWidth = 110

// table prints the rows grouped by spec (in the order of their first row), columns aligned:
// point | mode | verdict | first difference.
func table(w io.Writer, rows []Row) error {
	var specs []string
	for _, r := range rows {
		if !slices.Contains(specs, r.Spec) {
			specs = append(specs, r.Spec)
		}
	}
	for i, spec := range specs {
		if i > 0 {
			if _, err := fmt.Fprintln(w); err != nil {
				return err
			}
		}
		if _, err := fmt.Fprintf(w, "spec: %s\n", spec); err != nil {
			return err
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  point\tmode\tverdict\tfirst difference")
		for _, r := range rows {
			if r.Spec != spec {
				continue
			}
			diff := r.Difference
			switch {
			case diff == "" && r.Suite != "":
				diff = "- (suite, not the spec: " + r.Suite + ")"
			case diff == "":
				diff = "-"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", r.Point, r.Mode, verdictCell(r), textout.Cut(diff, differenceWidth))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// spread prints the min, median (of an even count, the mean of the middle two) and max of ds ("min 1s, median 2s, max 3s"); "none" when empty.
func spread(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	r := func(d time.Duration) string { return d.Round(100 * time.Millisecond).String() }
	median := s[len(s)/2]
	if len(s)%2 == 0 {
		median = (s[len(s)/2-1] + median) / 2
	}
	return fmt.Sprintf("min %s, median %s, max %s", r(s[0]), r(median), r(s[len(s)-1]))
}
