// Package perturb names the perturbation points ensemble can set on a case: an API fault answered to a chosen
// write, a manager restarted right after one, a manager's stale or coalesced view of a kind, an external
// system down or slow. A point is triggered by writes or by changes, never by wall time, so a rerun sets it
// at the same place. Parse and Point.String are inverses, so a point travels as one string: in ENSEMBLE_PERTURB, in make
// explore's table and in the command that reruns it. See docs/architecture.md §3 Perturbation.
package perturb

import (
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Mode is what a point does when it fires.
type Mode string

// The modes. The four API faults answer the write with an error and do not send it; the others let it through.
const (
	// Conflict answers the write 409 Conflict, as an update with a stale resourceVersion is answered.
	Conflict Mode = "conflict"
	// Throttle answers the write 429 Too Many Requests (retry after 1 s), as API priority and fairness does.
	Throttle Mode = "throttle"
	// Internal answers the write 500 Internal Server Error.
	Internal Mode = "internal"
	// Timeout answers the write 504 Gateway Timeout, the server's timeout of a request it may not have applied.
	Timeout Mode = "timeout"
	// Restart lets the write through, then stops the writer's manager (its later writes are refused, as a
	// crashed process makes none) and starts a fresh one from the same ManagerOptions, on new caches.
	Restart Mode = "restart"
	// Stale lets the write through; from then on the writer's manager's watch stream of the written
	// object's kind lags: the events of every object of that kind (the write's own change included) reach
	// that manager's cache only when the point is released, all of them in resourceVersion order, as behind
	// a slow watch.
	Stale Mode = "stale"
	// Coalesce is Stale whose release makes the manager's informers of the kind relist instead: the held
	// events are dropped and the informers get the net state of every object, so that manager never
	// observes the intermediate states.
	Coalesce Mode = "coalesce"
	// Down makes the external system named System unavailable in the case's namespace from the write until
	// the point is released.
	Down Mode = "down"
	// Slow makes the external system named System answer after Latency from the write until the point is
	// released.
	Slow Mode = "slow"
)

// Modes lists every mode, API faults first.
var Modes = []Mode{Conflict, Throttle, Internal, Timeout, Restart, Stale, Coalesce, Down, Slow}

// Fault reports whether m answers the write with an error instead of sending it.
func (m Mode) Fault() bool {
	return m == Conflict || m == Throttle || m == Internal || m == Timeout
}

// Held reports whether a point of mode m lasts until it is released (Stale, Coalesce, Down, Slow).
func (m Mode) Held() bool {
	return m == Stale || m == Coalesce || m == Down || m == Slow
}

// Point is one perturbation. Its Trigger counts writes or changes. A write trigger (Nth, Every, Rate)
// counts the writes of Writer (on Object, when set) in the case's namespace from 1. A change trigger
// (Change) counts the changes of Object, whoever made them, as Writer's manager's watch delivers them, and
// fires before that manager's cache sees the change: a fault mode then refuses Writer's next write, restart
// restarts Writer's manager before it could act on the change, stale and coalesce hold that manager's watch
// stream of Object's kind from that change on (the change included), down and slow begin there. Validate says
// whether a point can be carried out; Parse and Case.Perturb both ask it.
type Point struct {
	// Mode is what happens when the point fires.
	Mode Mode
	// System names the external system of Down and Slow (a suite.External's Name); Latency is Slow's delay.
	System  string
	Latency time.Duration
	// Writer is the manager ("multigres") or the controller ("multigres/multigres-shard") whose writes count.
	Writer string
	// Object narrows the counted writes to one object of the case's namespace, "Kind/name"; empty counts all.
	// A change trigger names the object whose changes it counts here (required). Its name may write the
	// case's namespace as CaseNamespace ("Node/<namespace>-cp-0"), as a Record names the case's objects, so
	// that a point made from one run's record names the same object in another run, whose namespace differs.
	// An object named anew each run (a random suffix) is named by its place instead, "Kind/*k": the k-th
	// object of that kind Writer wrote in the case, in the order of its first write to each (see Places and
	// Place); a write trigger then counts the writes on that object, so it fires on the same write of the
	// same object in every run however the writer's other writes interleave. Kubernetes names cannot hold
	// '*', so no real name reads as a place. A change trigger needs a name.
	Object string
	// Trigger is the one count the point fires on: Nth(n), Every(n), Rate(r) or Change(n).
	Trigger Trigger
	// For releases a held mode after this many further writes in the case's namespace (any writer). With
	// neither For nor Lag, the mode holds until the namespace is otherwise quiet, until the spec's next
	// quiescence check (Case.Quiescent), until Case.Release, or until the case's cleanup begins.
	For int
	// Lag holds a held mode for this long (wall time) from its firing, as an informer lagging behind the API
	// server does, however busy or quiet the namespace is; the spec's next quiescence check waits for it to
	// end, and Case.Release and the case's cleanup end it early. Written "+15s"; For and Lag exclude each
	// other.
	Lag time.Duration
}

// TriggerKind is what a trigger counts and how it matches the count; its value is the sign Point.String
// writes before the count.
type TriggerKind byte

// The trigger kinds.
const (
	// NthWrite fires on the N-th counted write.
	NthWrite TriggerKind = '#'
	// EveryWrite fires on every N-th counted write.
	EveryWrite TriggerKind = '%'
	// WriteRate fires on a fraction Rate of the counted writes, picked by a hash of their number and the
	// point, so a rerun picks the same ones.
	WriteRate TriggerKind = '~'
	// NthChange fires on the N-th change of the point's Object. A change is one the suite's event stream
	// records: a creation (the first, when the case saw it), a deletion, or an update that changed a field
	// other than resourceVersion, managedFields and timestamps.
	NthChange TriggerKind = '^'
)

// Trigger is the count a point fires on. Build one with Nth, Every, Rate or Change; the zero Trigger is no
// trigger, and Validate refuses it.
type Trigger struct {
	Kind TriggerKind
	// N is the count of NthWrite, EveryWrite and NthChange, from 1.
	N int
	// Rate is WriteRate's fraction, in [1e-06, 1].
	Rate float64
}

// Nth is the trigger that fires on the n-th counted write (n from 1).
func Nth(n int) Trigger { return Trigger{Kind: NthWrite, N: n} }

// Every is the trigger that fires on every n-th counted write.
func Every(n int) Trigger { return Trigger{Kind: EveryWrite, N: n} }

// Rate is the trigger that fires on a fraction r in [1e-06, 1] of the counted writes.
func Rate(r float64) Trigger { return Trigger{Kind: WriteRate, Rate: r} }

// Change is the trigger that fires on the n-th change of the point's Object (n from 1).
func Change(n int) Trigger { return Trigger{Kind: NthChange, N: n} }

// OnChange reports whether t counts an object's changes rather than writes.
func (t Trigger) OnChange() bool { return t.Kind == NthChange }

// String renders t as Point.String writes it: "#3", "%2", "~0.25" or "^1".
func (t Trigger) String() string {
	switch t.Kind {
	case WriteRate:
		return "~" + strconv.FormatFloat(t.Rate, 'g', -1, 64)
	case NthWrite, EveryWrite, NthChange:
		return string(rune(t.Kind)) + strconv.Itoa(t.N)
	}
	return "(no trigger)"
}

// Fires reports whether the point fires on the n-th counted write or change (from 1).
func (p Point) Fires(n int) bool {
	switch p.Trigger.Kind {
	case NthWrite, NthChange:
		return n == p.Trigger.N
	case EveryWrite:
		return p.Trigger.N > 0 && n%p.Trigger.N == 0
	case WriteRate:
		h := fnv.New64a()
		_, _ = fmt.Fprintf(h, "%s#%d", p.String(), n)
		return float64(h.Sum64()%1_000_000) < p.Trigger.Rate*1_000_000
	}
	return false
}

// CaseNamespace stands for the case's namespace in an object's name, as a Record writes its objects and a
// Point may name one: a cluster-scoped object named after its case's namespace (a Node "ns-1-cp-0" of case
// ns-1) is "Node/<namespace>-cp-0", the same in every run of the spec. See docs/architecture.md §3
// Perturbation.
const CaseNamespace = "<namespace>"

// RelativeName is name with the namespace ns written as CaseNamespace wherever it occurs; name itself when ns
// is empty.
func RelativeName(name, ns string) string {
	if ns == "" {
		return name
	}
	return strings.ReplaceAll(name, ns, CaseNamespace)
}

// In is p as it applies to the case of namespace ns: CaseNamespace in its Object replaced by ns, the object
// as the API server names it. Write p itself, not In's, where a point is reported: a write-rate trigger
// picks its writes by a hash of p's string.
func (p Point) In(ns string) Point {
	p.Object = strings.ReplaceAll(p.Object, CaseNamespace, ns)
	return p
}

// Counts reports whether a write by writer ("manager/controller", or the manager alone outside a pass) on
// kind/name is one the point counts: a write trigger's, by Writer on Object. place is the object's place
// among Writer's objects of kind, as PlaceOf numbered it for this write; only a point whose Object is
// "Kind/*k" reads it, and counts the write when place is k. A change trigger counts no write: Object's
// changes are counted in Writer's manager's watch (see Refuses for its fault modes).
func (p Point) Counts(writer, kind, name string, place int) bool {
	if p.Trigger.OnChange() || !p.Names(writer) {
		return false
	}
	if k, n, ok := p.Place(); ok {
		return kind == k && place == n
	}
	return p.Object == "" || p.Object == kind+"/"+name
}

// placeSign starts the name of an Object named by its place ("Machine/*2"), a character no Kubernetes name
// holds.
const placeSign = "*"

// Place reports whether Object names an object by its place among Writer's objects of its kind ("Kind/*k",
// see Object), and returns the kind and k (from 1). A name with placeSign that is not followed by a
// positive number is no place (Validate refuses it).
func (p Point) Place() (kind string, k int, ok bool) {
	kind, name, _ := strings.Cut(p.Object, "/")
	digits, isPlace := strings.CutPrefix(name, placeSign)
	if !isPlace {
		return "", 0, false
	}
	k, err := strconv.Atoi(digits)
	if err != nil || k <= 0 || strconv.Itoa(k) != digits {
		return "", 0, false
	}
	return kind, k, true
}

// PlaceOf numbers a write by writer on kind/name in places, the numbering of one case's writes for this
// point, and returns the object's place (from 1): for a write trigger whose Object is "Kind/*k", on a write
// of that kind by a writer the point Names. verb is the write's ("create", "update", ... as a RecordWrite
// writes it): a write without a name is a new object when it is a create (generateName), and on no one
// object otherwise (a delete of all of a kind's objects). Any other write or point numbers nothing and gets
// 0. Call it on every write in order, then Counts with its result.
func (p Point) PlaceOf(places *Places, writer, verb, kind, name string) int {
	k, _, ok := p.Place()
	if !ok || kind != k || p.Trigger.OnChange() || !p.Names(writer) || name == "" && verb != VerbCreate {
		return 0
	}
	return places.Of(kind, name)
}

// VerbCreate is a create's verb as a RecordWrite and the harness write it, which PlaceOf reads.
const VerbCreate = "create"

// Places numbers, by kind, the objects one writer wrote, in the order of its first write to each: the
// places a point's "Kind/*k" Object names. The harness numbers a write before it is sent, so a write with
// no name, a create with generateName whose name the API server picks, counts as a new object of its kind
// (it is, unless it is refused); Name then gives that place the name the answer carries, so the object's
// later writes have its place too. A Record writes the answer's name, or none for a refused create, so
// numbering a record's writes gives the same places. The zero Places is empty and ready.
type Places struct {
	// byObject is the place of each named object, by "Kind/name"; last the places handed out, by kind.
	byObject map[string]int
	last     map[string]int
}

// Of returns kind/name's place, numbering it as the next of its kind when it has none; a name "" is always
// a new object.
func (pl *Places) Of(kind, name string) int {
	if pl.byObject == nil {
		pl.byObject, pl.last = map[string]int{}, map[string]int{}
	}
	if n, ok := pl.byObject[kind+"/"+name]; ok && name != "" {
		return n
	}
	pl.last[kind]++
	n := pl.last[kind]
	if name != "" {
		pl.byObject[kind+"/"+name] = n
	}
	return n
}

// Name gives the object at place of kind, numbered by Of without a name, its name (the API server's answer
// to its create), so that Of returns place for its later writes. A name that has a place already keeps it.
func (pl *Places) Name(kind, name string, place int) {
	if name == "" || place <= 0 {
		return
	}
	if pl.byObject == nil {
		pl.byObject, pl.last = map[string]int{}, map[string]int{}
	}
	if _, ok := pl.byObject[kind+"/"+name]; !ok {
		pl.byObject[kind+"/"+name] = place
	}
}

// Refuses reports whether a fault point whose change trigger fired refuses a write by writer: any write of
// Writer, on any object.
func (p Point) Refuses(writer string) bool {
	return p.Trigger.OnChange() && p.Mode.Fault() && p.Names(writer)
}

// Manager is the manager part of Writer ("multigres" of "multigres/multigres-shard").
func (p Point) Manager() string {
	m, _, _ := strings.Cut(p.Writer, "/")
	return m
}

// Names reports whether writer ("manager/controller", or a manager alone) is Writer or one of its
// controllers: whether the point's Writer names it.
func (p Point) Names(writer string) bool {
	return writer == p.Writer || strings.HasPrefix(writer, p.Writer+"/")
}

// Error is the API error a fault point answers a write on resource/name with; nil for a mode that is no
// fault. The message names the point, so a log line shows that ensemble, not the API server, refused it.
func (p Point) Error(resource schema.GroupResource, name string) error {
	msg := "ensemble: injected by point " + p.String()
	switch p.Mode {
	case Conflict:
		return apierrors.NewConflict(resource, name, errors.New(msg))
	case Throttle:
		return apierrors.NewTooManyRequests(msg, 1)
	case Internal:
		return apierrors.NewInternalError(errors.New(msg))
	case Timeout:
		return apierrors.NewTimeoutError(msg, 1)
	}
	return nil
}

// String renders the point in the form Parse reads:
//
//	mode[(system[,latency])]@writer[:Kind/name|:Kind/*k](#n|%n|~rate|^n)[+n|+duration]
//
// for example "conflict@multigres/multigres-shard:Shard/mg-db-tg-0#3", "restart@matrixone#5",
// "stale@multigres/multigres-shard:Pod/mg-db-tg-0-pool-0#1+4", "slow(hakeeper,200ms)@matrixone%2" and
// "coalesce@multigres/multigres-shard:Pod/mg-db-tg-0-pool-0^3" (from the pod's third change) and
// "stale@capi/machinedeployment#1+15s" (that manager's watch of the first write's kind held for 15 s from
// that write on) and "stale@capi/machineset:Machine/*2#1+15s" (the first write on the second Machine that
// controller wrote, its create: that manager's Machine watch held for 15 s from it).
func (p Point) String() string {
	var b strings.Builder
	b.WriteString(string(p.Mode))
	if p.System != "" {
		b.WriteString("(" + p.System)
		if p.Latency > 0 {
			b.WriteString("," + p.Latency.String())
		}
		b.WriteString(")")
	}
	b.WriteString("@" + p.Writer)
	if p.Object != "" {
		b.WriteString(":" + p.Object)
	}
	b.WriteString(p.Trigger.String())
	if p.For > 0 {
		b.WriteString("+" + strconv.Itoa(p.For))
	}
	if p.Lag > 0 {
		b.WriteString("+" + p.Lag.String())
	}
	return b.String()
}

// unwritable are the characters Point.String gives a meaning to after the writer, so a writer or object
// holding one could not be read back.
const unwritable = "@#%~^+() \t\n;"

// grammar is repeated in Parse's errors, so a typo is answered with the form to use.
const grammar = "mode[(system[,latency])]@writer[:Kind/name|:Kind/*k](#n|%n|~rate|^n)[+n|+duration], e.g. conflict@multigres/multigres-shard#3"

// Parse reads a point written as Point.String writes it, then asks Validate. Errors: a point without '@'
// or a trigger sign, a latency or count that is not a number, and Validate's; each names the part and the
// form to use.
func Parse(s string) (Point, error) {
	fail := func(format string, args ...any) (Point, error) {
		return Point{}, fmt.Errorf("perturb: point %q: %s (the form is %s)", s, fmt.Sprintf(format, args...), grammar)
	}
	head, rest, ok := strings.Cut(strings.TrimSpace(s), "@")
	if !ok {
		return fail("no '@' between the mode and the writer")
	}
	var p Point
	mode, args, hasArgs := strings.Cut(head, "(")
	p.Mode = Mode(mode)
	if hasArgs {
		if !strings.HasSuffix(args, ")") {
			return fail("the system's '(' is not closed")
		}
		sys, lat, hasLat := strings.Cut(strings.TrimSuffix(args, ")"), ",")
		p.System = sys
		if hasLat {
			d, err := time.ParseDuration(lat)
			if err != nil || d <= 0 {
				return fail("latency %q is not a positive duration such as 200ms", lat)
			}
			p.Latency = d
		}
		if p.System == "" {
			return fail("the parentheses name no system")
		}
	}
	i := strings.IndexAny(rest, "#%~^")
	if i < 0 {
		if err := p.validateMode(); err != nil {
			return fail("%v", err)
		}
		return fail("no trigger: end the writer with #n (the n-th write), %%n (every n-th), ~rate or, after Kind/name, ^n (the object's n-th change)")
	}
	who, trig := rest[:i], rest[i:]
	var hasObject bool
	p.Writer, p.Object, hasObject = strings.Cut(who, ":")
	if hasObject && p.Object == "" {
		return fail("object \"\" is not Kind/name")
	}
	trig, hold, hasFor := strings.Cut(trig, "+")
	if hasFor {
		if n, err := strconv.Atoi(hold); err == nil && n > 0 {
			p.For = n
		} else if d, err := time.ParseDuration(hold); err == nil && d > 0 {
			p.Lag = d
		} else {
			return fail("+%s is neither a positive count of writes (+4) nor a positive duration (+15s)", hold)
		}
	}
	p.Trigger.Kind = TriggerKind(trig[0])
	if p.Trigger.Kind == WriteRate {
		r, err := strconv.ParseFloat(trig[1:], 64)
		if err != nil {
			return fail("rate %q is not a fraction in [1e-06, 1]", trig[1:])
		}
		p.Trigger.Rate = r
	} else {
		n, err := strconv.Atoi(trig[1:])
		if err != nil {
			return fail("trigger %q is not %c and a positive number", trig, trig[0])
		}
		p.Trigger.N = n
	}
	if err := p.Validate(); err != nil {
		return fail("%v", err)
	}
	return p, nil
}

// Validate reports whether p can be carried out, the one check Parse and Case.Perturb share. Errors: an
// unknown mode, a system on a mode that takes none (or none on Down and Slow), a latency on a mode other
// than Slow (or none on it), an empty writer or one with more than one '/', a writer or object holding a character the point's
// string gives a meaning to (unwritable, and ':' in a writer), an object that is not
// Kind/name or Kind/*k (a '*' elsewhere, or not followed by a positive number), no trigger or a count that is not positive (a rate outside [1e-06, 1] or NaN), a change trigger without
// an object or on an object named by its place, a negative For or Lag, For and Lag both set, or either on a mode that is not held.
func (p Point) Validate() error {
	if err := p.validateMode(); err != nil {
		return err
	}
	if p.Writer == "" || strings.Count(p.Writer, "/") > 1 || strings.ContainsAny(p.Writer, unwritable+":") {
		return fmt.Errorf("writer %q is not a manager or manager/controller the point's string can carry (no %q, %q)", p.Writer, unwritable, ":")
	}
	if p.Object != "" {
		if k, n, ok := strings.Cut(p.Object, "/"); !ok || k == "" || n == "" || strings.Contains(n, "/") || strings.ContainsAny(p.Object, unwritable) {
			return fmt.Errorf("object %q is not Kind/name the point's string can carry (no %q)", p.Object, unwritable)
		}
		if _, _, ok := p.Place(); !ok && strings.Contains(p.Object, placeSign) {
			return fmt.Errorf("object %q is neither Kind/name (a name holds no %q) nor Kind/*k, the k-th object of that kind the writer wrote (k a positive number)", p.Object, placeSign)
		}
	}
	switch t := p.Trigger; t.Kind {
	case NthWrite, EveryWrite, NthChange:
		if t.Rate != 0 {
			return fmt.Errorf("trigger %s sets a Rate too: build it with Nth, Every or Change", t)
		}
		if t.N <= 0 {
			return fmt.Errorf("trigger %q is not %c and a positive number", t, rune(t.Kind))
		}
		if t.Kind == NthChange && p.Object == "" {
			return fmt.Errorf("a change trigger ^%d counts the changes of one object: name it, as %s:Kind/name^%d", t.N, p.Writer, t.N)
		}
		if _, _, place := p.Place(); t.Kind == NthChange && place {
			return fmt.Errorf("a change trigger ^%d counts the changes of an object by its name, not by its place %s: use a write trigger (#n) on the place", t.N, p.Object)
		}
	case WriteRate:
		// Written so that NaN fails too; below one in a million the hash never picks a write.
		if !(t.Rate >= 1e-6 && t.Rate <= 1) || t.N != 0 {
			return fmt.Errorf("rate %v is not a fraction in [1e-06, 1] (build it with Rate alone)", t.Rate)
		}
	default:
		return errors.New("no trigger: set Trigger to Nth(n) (the n-th write), Every(n), Rate(r) or, with an Object, Change(n) (the object's n-th change)")
	}
	switch {
	case p.For < 0:
		return fmt.Errorf("+%d is not a positive count of writes", p.For)
	case p.Lag < 0:
		return fmt.Errorf("+%s is not a positive duration", p.Lag)
	case p.For > 0 && p.Lag > 0:
		return fmt.Errorf("+%d and +%s both set how long the hold lasts: keep one", p.For, p.Lag)
	case (p.For > 0 || p.Lag > 0) && !p.Mode.Held():
		return fmt.Errorf("+n and +duration apply to the held modes (stale, coalesce, down, slow), not %s", p.Mode)
	}
	return nil
}

// validateMode checks the mode and its system and latency (Validate's first part).
func (p Point) validateMode() error {
	switch {
	case !known(p.Mode):
		return fmt.Errorf("unknown mode %q: use one of %s", p.Mode, modeList())
	case (p.Mode == Down || p.Mode == Slow) && p.System == "":
		return fmt.Errorf("mode %s names the external system it acts on, as %s(pooler)", p.Mode, p.Mode)
	case p.Mode != Down && p.Mode != Slow && (p.System != "" || p.Latency != 0):
		return fmt.Errorf("mode %s takes no system or latency", p.Mode)
	case p.Mode == Slow && p.Latency <= 0:
		return fmt.Errorf("mode slow needs a latency, as slow(%s,200ms)", p.System)
	case p.Mode == Down && p.Latency != 0:
		return errors.New("mode down takes no latency")
	}
	return nil
}

// ParseRuns reads ENSEMBLE_PERTURB: the runs of each spec in one process, separated by "|", each a list of
// points in ParseList's form (an empty one is an unperturbed run). "" and a list without "|" are one run;
// "|" is two unperturbed runs. Errors: ParseList's, naming the run when there are several.
func ParseRuns(s string) ([][]Point, error) {
	var out [][]Point
	runs := strings.Split(s, RunSeparator)
	for i, run := range runs {
		points, err := ParseList(run)
		if err != nil && len(runs) > 1 {
			return nil, fmt.Errorf("run %d: %w", i+1, err)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, points)
	}
	return out, nil
}

// RunSeparator separates the runs of ENSEMBLE_PERTURB (see ParseRuns).
const RunSeparator = "|"

// ParseList reads points separated by spaces or semicolons (one run of ENSEMBLE_PERTURB). Errors: Parse's.
func ParseList(s string) ([]Point, error) {
	var out []Point
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ';' || r == ' ' || r == '\n' || r == '\t' }) {
		p, err := Parse(f)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

func known(m Mode) bool {
	for _, k := range Modes {
		if m == k {
			return true
		}
	}
	return false
}

func modeList() string {
	var s []string
	for _, m := range Modes {
		s = append(s, string(m))
	}
	return strings.Join(s, ", ")
}
