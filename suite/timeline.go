package suite

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"html/template"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"
)

// mark is a failure a case noted (an assertion, oracle, invariant or script step that failed) or, with
// Point set, a perturbation point that fired. The timeline draws it across every lane at At, labelled What.
type mark struct {
	At    time.Time
	What  string
	Point bool
}

// mark notes a failure of the case now, for its timeline.
func (c *Case) mark(what string) { c.markAt(time.Now(), what) }

// markAt notes a failure of the case seen at `at` (an invariant's violation keeps its own time). The same
// failure noted twice (at the same time, with the same text) is kept once.
func (c *Case) markAt(at time.Time, what string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range c.marks {
		if m.At.Equal(at) && m.What == what {
			return
		}
	}
	c.marks = append(c.marks, mark{At: at, What: what})
}

// markPoint notes that a perturbation point fired at `at` (what: where, as the case's report names it).
func (c *Case) markPoint(at time.Time, what string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.marks = append(c.marks, mark{At: at, What: what, Point: true})
}

// failureMarks returns the case's marks; when the spec failed without noting a failure, one mark at `at`
// says so.
func (c *Case) failureMarks(at time.Time) []mark {
	c.mu.Lock()
	marks := append([]mark(nil), c.marks...)
	c.mu.Unlock()
	if c.t.Failed() && !slices.ContainsFunc(marks, func(m mark) bool { return !m.Point }) {
		marks = append(marks, mark{At: at, What: "the spec failed (see its report)"})
	}
	return marks
}

// timelineFilter reads ENSEMBLE_TIMELINE: empty is nil (no timeline for a passing spec), "1" matches every
// spec name, anything else is a regexp of spec names. Errors: a value that is not a regexp.
func timelineFilter(v string) (*regexp.Regexp, error) {
	switch v {
	case "":
		return nil, nil
	case "1":
		return regexp.MustCompile(""), nil
	}
	re, err := regexp.Compile(v)
	if err != nil {
		return nil, fmt.Errorf("suite: ENSEMBLE_TIMELINE=%q is neither 1 nor a regexp (%v): set it to 1 for a timeline of every spec, or to a regexp of spec names", v, err)
	}
	return re, nil
}

// writeCaseTimeline writes the case's timeline with its marks (see failureMarks) and returns "timeline
// <page>, trace-event JSON (Perfetto) <trace>" for a log line, or the error's text.
func (c *Case) writeCaseTimeline(at time.Time) string {
	h, tr, err := c.s.writeTimeline(c.Namespace, c.t.Name(), c.Started, c.failureMarks(at))
	if err != nil {
		return err.Error()
	}
	return "timeline " + h + ", trace-event JSON (Perfetto) " + tr
}

// The lane of the changes no recorded write's resourceVersion matches (kube-controller-manager's, the API
// server's own, a delete's, a pod binding's), as FieldWriters names their writer.
const unrecordedLane = "<unrecorded>"

// laneOfCase is the lane of a Case's own writes.
const laneOfCase = "case/spec"

// timeline is the history of one namespace laid out in lanes, the model both renderings draw.
type timeline struct {
	spec, ns   string
	since, end time.Time
	lanes      []*lane
	marks      []mark
}

// lane is one writer's row: a controller's passes and writes, a manager's writes outside a pass, a Case's
// writes, or the unrecorded changes.
type lane struct {
	name    string
	passes  []Pass
	writes  []laneWrite
	changes []Change
}

// laneWrite is a write with the change it made: made is nil when the stream saw no change with the write's
// resourceVersion; noop is true when an earlier write already answered with that resourceVersion.
type laneWrite struct {
	Write
	made *Change
	noop bool
}

// buildTimeline lays out the passes and writes of namespace ns from `since` to now, and the changes no write
// made.
func (s *Suite) buildTimeline(ns, spec string, since time.Time, marks []mark) *timeline {
	tl := &timeline{spec: spec, ns: ns, since: since, end: since, marks: marks}
	lanes := map[string]*lane{}
	get := func(name string) *lane {
		if lanes[name] == nil {
			lanes[name] = &lane{name: name}
		}
		return lanes[name]
	}
	later := func(t time.Time) {
		if t.After(tl.end) {
			tl.end = t
		}
	}
	changes := s.stream.changes(ns, ChangeFilter{Since: since})
	byRV := map[string]*Change{}
	for i := range changes {
		byRV[changes[i].Kind+"/"+changes[i].ResourceVersion] = &changes[i]
		later(changes[i].Time)
	}
	madeBy := map[string]bool{}
	for _, w := range s.rec.writes(ns, WriteFilter{Since: since, IncludeRejected: true, conversions: true}) {
		lw := laneWrite{Write: w}
		if rv := w.Kind + "/" + w.ResourceVersion; w.ResourceVersion != "" {
			lw.noop = madeBy[rv]
			if !lw.noop {
				lw.made = byRV[rv]
			}
			madeBy[rv] = true
		}
		l := get(w.writer())
		l.writes = append(l.writes, lw)
		later(w.Time)
	}
	for _, c := range changes {
		if !madeBy[c.Kind+"/"+c.ResourceVersion] {
			l := get(unrecordedLane)
			l.changes = append(l.changes, c)
		}
	}
	for _, p := range s.rec.allPasses(ns, since) {
		l := get(p.Manager + "/" + p.Controller)
		l.passes = append(l.passes, p)
		later(p.Start)
		later(p.End)
	}
	for _, m := range marks {
		later(m.At)
	}
	// Up to now, so that the quiet end of a spec shows (a quiescence window, a Consistently).
	later(time.Now())
	for _, l := range lanes {
		tl.lanes = append(tl.lanes, l)
	}
	// The case's lane first, the unrecorded changes last, the controllers and fakes by name between.
	rank := func(n string) int {
		switch n {
		case laneOfCase:
			return 0
		case unrecordedLane:
			return 2
		}
		return 1
	}
	sort.Slice(tl.lanes, func(i, j int) bool {
		a, b := tl.lanes[i].name, tl.lanes[j].name
		if rank(a) != rank(b) {
			return rank(a) < rank(b)
		}
		return a < b
	})
	return tl
}

// offset is t's distance from the timeline's start, never negative.
func (tl *timeline) offset(t time.Time) time.Duration {
	if t.Before(tl.since) {
		return 0
	}
	return t.Sub(tl.since)
}

// passEnd is when a pass ended, or the timeline's end for one still running.
func (tl *timeline) passEnd(p Pass) time.Time {
	if p.End.IsZero() {
		return tl.end
	}
	return p.End
}

// detail is one line of an element's details: the hover text of the page, an arg of the trace.
type detail struct{ k, v string }

func (tl *timeline) writeDetails(w laneWrite) []detail {
	sub := string(w.Verb)
	if w.Subresource != "" {
		sub += " " + w.Subresource
	}
	d := []detail{
		{"write", fmt.Sprintf("#%d %s %s/%s", w.Seq, sub, w.Kind, w.Name)},
		{"at", ms(tl.offset(w.Time))},
		{"writer", w.writer()},
		{"field owner", or(w.FieldOwner, "(none: derived from the User-Agent)")},
		{"pass", passRef(w.Pass)},
		{"resourceVersion", or(w.ResourceVersion, "(none)")},
	}
	if w.Err != nil {
		d = append(d, detail{"error", w.Err.Error()})
	}
	if w.Point != "" {
		d = append(d, detail{"perturbation", w.Point})
	}
	switch {
	case w.noop:
		d = append(d, detail{"changed", "nothing (an earlier write answered with this resourceVersion)"})
	case w.made != nil:
		d = append(d, detail{"changed", w.made.describe()})
	case w.Err == nil && w.ResourceVersion != "":
		d = append(d, detail{"changed", "no change the event stream saw (bookkeeping only, or a kind it does not watch)"})
	case w.Err == nil && w.Verb == VerbCreate && w.Subresource != "":
		d = append(d, detail{"changed", "not known: a subresource create answers with no resourceVersion (its change is in " + unrecordedLane + ")"})
	}
	return d
}

func (tl *timeline) passDetails(p Pass) []detail {
	state := "returned no error"
	switch {
	case p.Gated:
		state = "GATED: the gate refused the request, the reconciler was not called"
	case p.End.IsZero():
		state = "still running"
	case p.Err != nil:
		state = "error: " + p.Err.Error()
	}
	d := []detail{
		{"pass", fmt.Sprintf("#%d %s/%s %s n=%d", p.ID, p.Manager, p.Controller, p.Request.NamespacedName, p.N)},
		{"at", ms(tl.offset(p.Start)) + " for " + ms(tl.passEnd(p).Sub(p.Start))},
		{"result", state},
	}
	if p.Asked > 0 {
		d = append(d, detail{"requeueAfter", fmt.Sprintf("%s (asked %s)", p.RequeueAfter, p.Asked)})
	}
	return d
}

func (tl *timeline) changeDetails(c Change) []detail {
	return []detail{
		{"change", fmt.Sprintf("#%d %s %s/%s", c.Seq, c.Type, c.Kind, c.Name)},
		{"at", ms(tl.offset(c.Time))},
		{"resourceVersion", c.ResourceVersion},
		{"made by", "no recorded write's resourceVersion: kube-controller-manager, the API server, a delete, a subresource create such as a pod binding, or a client ensemble does not see"},
		{"changed", c.describe()},
	}
}

// describe lists a change's field transitions, at most 20, one a line.
func (c *Change) describe() string {
	if c.Type != Modified {
		return string(c.Type)
	}
	var lines []string
	for i, f := range c.Fields {
		if i == 20 {
			lines = append(lines, fmt.Sprintf("... and %d more", len(c.Fields)-20))
			break
		}
		lines = append(lines, fmt.Sprintf("%s: %s -> %s", f.Path, f.Old, f.New))
	}
	return strings.Join(lines, "\n  ")
}

func or(s, alt string) string {
	if s == "" {
		return alt
	}
	return s
}

func passRef(id int64) string {
	if id == 0 {
		return "none (outside a reconcile pass)"
	}
	return fmt.Sprintf("#%d", id)
}

// ms renders a duration in milliseconds, to a tenth.
func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

func joinDetails(ds []detail) string {
	var b strings.Builder
	for i, d := range ds {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(d.k + ": " + d.v)
	}
	return b.String()
}

func detailArgs(ds []detail) map[string]string {
	m := map[string]string{}
	for _, d := range ds {
		m[d.k] = d.v
	}
	return m
}

// writeTimeline writes the timeline of namespace ns since `since` into the case's artifacts directory:
// timeline.html (a self-contained page, one lane per controller, fake and the case) and timeline.trace.json
// (the same as Chrome trace events, for Perfetto or chrome://tracing). It returns both paths. Errors: the
// directory or a file cannot be written.
func (s *Suite) writeTimeline(ns, spec string, since time.Time, marks []mark) (htmlPath, tracePath string, err error) {
	tl := s.buildTimeline(ns, spec, since, marks)
	page, err := tl.html()
	if err != nil {
		return "", "", fmt.Errorf("suite: timeline: %w", err)
	}
	trace, err := tl.trace()
	if err != nil {
		return "", "", fmt.Errorf("suite: timeline: %w", err)
	}
	dir := s.caseArtifacts(ns, spec)
	htmlPath, tracePath = filepath.Join(dir, "timeline.html"), filepath.Join(dir, "timeline.trace.json")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", fmt.Errorf("suite: timeline: %w", err)
	}
	if err := os.WriteFile(htmlPath, page, 0o644); err != nil {
		return "", "", fmt.Errorf("suite: timeline: %w", err)
	}
	if err := os.WriteFile(tracePath, trace, 0o644); err != nil {
		return "", "", fmt.Errorf("suite: timeline: %w", err)
	}
	return htmlPath, tracePath, nil
}

// traceEvent is one event of the Chrome trace-event format: ts and dur in microseconds.
type traceEvent struct {
	Name string            `json:"name"`
	Cat  string            `json:"cat,omitempty"`
	Ph   string            `json:"ph"`
	Ts   float64           `json:"ts"`
	Dur  *float64          `json:"dur,omitempty"`
	Pid  int               `json:"pid"`
	Tid  int               `json:"tid"`
	S    string            `json:"s,omitempty"`
	Args map[string]string `json:"args,omitempty"`
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// trace renders the timeline as Chrome trace-event JSON: pid 1, a thread per lane (tid from 1, in the
// page's order), passes as complete events, writes and unrecorded changes as thread instants, marks as
// global instants.
func (tl *timeline) trace() ([]byte, error) {
	ev := []traceEvent{{Name: "process_name", Ph: "M", Pid: 1, Args: map[string]string{"name": "ensemble " + tl.spec + " (" + tl.ns + ")"}}}
	for i, l := range tl.lanes {
		tid := i + 1
		ev = append(ev,
			traceEvent{Name: "thread_name", Ph: "M", Pid: 1, Tid: tid, Args: map[string]string{"name": l.name}},
			traceEvent{Name: "thread_sort_index", Ph: "M", Pid: 1, Tid: tid, Args: map[string]string{"sort_index": fmt.Sprint(tid)}})
		for _, p := range l.passes {
			cat, name := "pass", "reconcile "+p.Request.NamespacedName.String()
			if p.Gated {
				cat, name = "gated", "gated "+p.Request.NamespacedName.String()
			}
			dur := micros(tl.passEnd(p).Sub(p.Start))
			ev = append(ev, traceEvent{Name: name, Cat: cat, Ph: "X", Ts: micros(tl.offset(p.Start)), Dur: &dur, Pid: 1, Tid: tid, Args: detailArgs(tl.passDetails(p))})
		}
		for _, w := range l.writes {
			cat := "write"
			if w.Err != nil {
				cat = "rejected"
			}
			ev = append(ev, traceEvent{Name: fmt.Sprintf("%s %s/%s", w.Verb, w.Kind, w.Name), Cat: cat, Ph: "i", S: "t", Ts: micros(tl.offset(w.Time)), Pid: 1, Tid: tid, Args: detailArgs(tl.writeDetails(w))})
		}
		for _, c := range l.changes {
			ev = append(ev, traceEvent{Name: fmt.Sprintf("%s %s/%s", c.Type, c.Kind, c.Name), Cat: "change", Ph: "i", S: "t", Ts: micros(tl.offset(c.Time)), Pid: 1, Tid: tid, Args: detailArgs(tl.changeDetails(c))})
		}
	}
	for _, m := range tl.marks {
		cat := "failure"
		if m.Point {
			cat = "point"
		}
		ev = append(ev, traceEvent{Name: firstLine(m.What, 200), Cat: cat, Ph: "i", S: "g", Ts: micros(tl.offset(m.At)), Pid: 1, Args: map[string]string{cat: m.What}})
	}
	return json.MarshalIndent(struct {
		TraceEvents     []traceEvent `json:"traceEvents"`
		DisplayTimeUnit string       `json:"displayTimeUnit"`
	}{ev, "ms"}, "", " ")
}

// firstLine is s's first line, cut to n characters.
func firstLine(s string, n int) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > n {
		s = s[:n] + "..."
	}
	return s
}

//go:embed timeline.html.tmpl
var timelinePage string

var timelineTemplate = template.Must(template.New("timeline").
	Funcs(template.FuncMap{"sub100": func(x float64) float64 { return 100 - x }}).Parse(timelinePage))

// The page's data: positions are percentages of the time axis.
type (
	pageData struct {
		Spec, Namespace, Start, Span string
		// Width is the canvas's width in pixels (lane labels and time axis); HeadHeight the height of the
		// row that holds the failures' labels.
		Width, HeadHeight int
		Counts            string
		Lanes             []pageLane
		Ticks             []pageTick
		Marks             []pageMark
	}
	pageLane struct {
		Name  string
		Items []pageItem
	}
	pageItem struct {
		Kind, Label, Title string
		Left, Width        float64
		// Err marks a pass that returned an error, Noop a write that changed nothing.
		Err, Noop bool
	}
	pageTick struct {
		Left  float64
		Label string
	}
	pageMark struct {
		Left           float64
		At, Text, Full string
		// Top is the label's offset in pixels: one row per failure, in time order.
		Top   int
		Right bool
		// Point is a fired perturbation point's mark, not a failure's.
		Point bool
	}
)

// html renders the timeline as a self-contained page (no network, no external script, style or font).
func (tl *timeline) html() ([]byte, error) {
	span := tl.end.Sub(tl.since)
	if span < time.Millisecond {
		span = time.Millisecond
	}
	span += span / 50 // room after the last event
	pct := func(t time.Time) float64 { return 100 * float64(tl.offset(t)) / float64(span) }
	d := pageData{Spec: tl.spec, Namespace: tl.ns, Start: tl.since.Format("2006-01-02 15:04:05.000 MST"), Span: ms(tl.end.Sub(tl.since))}
	var nw, nr, np, ng, nc, npoints int
	for _, m := range tl.marks {
		if m.Point {
			npoints++
		}
	}
	for _, l := range tl.lanes {
		pl := pageLane{Name: l.name}
		for _, p := range l.passes {
			it := pageItem{Kind: "pass", Left: pct(p.Start), Width: pct(tl.passEnd(p)) - pct(p.Start), Title: joinDetails(tl.passDetails(p)), Err: p.Err != nil}
			if p.Gated {
				it.Kind = "gated"
				ng++
			} else {
				np++
			}
			pl.Items = append(pl.Items, it)
		}
		for _, w := range l.writes {
			it := pageItem{Kind: "write", Left: pct(w.Time), Label: verbLetter(w.Verb), Title: joinDetails(tl.writeDetails(w)), Noop: w.noop}
			if w.Err != nil {
				it.Kind, it.Label = "rejected", "✕"
				nr++
			} else {
				nw++
			}
			pl.Items = append(pl.Items, it)
		}
		for _, c := range l.changes {
			pl.Items = append(pl.Items, pageItem{Kind: "change", Left: pct(c.Time), Label: changeLetter(c.Type), Title: joinDetails(tl.changeDetails(c))})
			nc++
		}
		d.Lanes = append(d.Lanes, pl)
	}
	d.Counts = fmt.Sprintf("%s, %d rejected, %s, %d gated, %s, %s", count(nw, "write"), nr, count(np, "pass"), ng,
		count(nc, "unrecorded change"), count(len(tl.marks)-npoints, "failure"))
	if npoints > 0 {
		d.Counts += ", " + count(npoints, "fired point")
	}
	step := tickStep(span)
	for t := time.Duration(0); t <= span; t += step {
		d.Ticks = append(d.Ticks, pageTick{Left: 100 * float64(t) / float64(span), Label: tickLabel(t, step)})
	}
	marks := append([]mark(nil), tl.marks...)
	sort.SliceStable(marks, func(i, j int) bool { return marks[i].At.Before(marks[j].At) })
	for i, m := range marks {
		left := pct(m.At)
		d.Marks = append(d.Marks, pageMark{Left: left, At: ms(tl.offset(m.At)), Text: firstLine(m.What, 160), Full: m.What, Top: 3 + markRow*i, Right: left > 50, Point: m.Point})
	}
	d.HeadHeight = 6 + markRow*len(d.Marks)
	// Wide enough that the densest second stays readable: about 600 px a second, at least 1400 px, at most
	// 24000 px (the page's zoom buttons change it).
	d.Width = labelWidth + int(math.Min(24000, math.Max(1400, 600*span.Seconds())))
	var b bytes.Buffer
	if err := timelineTemplate.Execute(&b, d); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// The page's fixed sizes in pixels: the lane labels' column and a failure label's row.
const (
	labelWidth = 280
	markRow    = 18
)

// count renders n things: "1 write", "2 writes", "3 passes".
func count(n int, thing string) string {
	switch {
	case n == 1:
		return "1 " + thing
	case strings.HasSuffix(thing, "s"):
		return fmt.Sprintf("%d %ses", n, thing)
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// verbLetter is the letter the timeline draws a write of verb v with: C, U, P, A, D (deletes), W (a webhook's
// admission or conversion).
func verbLetter(v Verb) string {
	switch v {
	case VerbCreate:
		return "C"
	case VerbUpdate:
		return "U"
	case VerbPatch:
		return "P"
	case VerbApply:
		return "A"
	case VerbAdmit, VerbConvert:
		return "W"
	}
	return "D"
}

func changeLetter(t ChangeType) string { return string(t)[:1] }

// tickStep is the 1, 2 or 5 times a power of ten that cuts span into at most about 12 ticks.
func tickStep(span time.Duration) time.Duration {
	for step := time.Microsecond; ; step *= 10 {
		for _, m := range []time.Duration{1, 2, 5} {
			if span/(m*step) <= 12 {
				return m * step
			}
		}
	}
}

func tickLabel(t, step time.Duration) string {
	if step >= time.Second {
		return fmt.Sprintf("%g s", t.Seconds())
	}
	return fmt.Sprintf("%g ms", float64(t)/float64(time.Millisecond))
}
