package suite

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// The hot-loop threshold: an object written at least hotLoopPerSlice times in each of hotLoopSlices
// consecutive slices of hotLoopSlice, that is at 10 writes/s or more for 1.5 s. Sustained, so that the burst
// of writes a healthy object takes while it comes up (up to 30 within a second, measured) is not a loop; a
// 10 writes/s loop crosses it about 1.5 s after it starts.
const (
	hotLoopSlice    = 500 * time.Millisecond
	hotLoopSlices   = 3
	hotLoopPerSlice = 5
)

// hotLoopErrors renders each object of the case's namespace that crossed the hot-loop threshold.
func (c *Case) hotLoopErrors(*judgement) []string {
	var out []string
	for _, h := range c.s.rec.hotLoopsIn(c.Namespace, c.Started) {
		c.markAt(h.At, fmt.Sprintf("oracle %s: %s/%s", HotLoop, h.Kind, h.Name))
		out = append(out, h.String()+c.fieldsWritten(h))
	}
	return out
}

// fieldsWritten names the fields the hot loop's writes changed, most often changed first.
func (c *Case) fieldsWritten(h hotLoop) string {
	byRV := map[string]bool{}
	for _, w := range h.writes {
		byRV[w.ResourceVersion] = true
	}
	fields := map[string]int{}
	for _, ch := range c.s.stream.changes(c.Namespace, ChangeFilter{Kind: h.Kind, Name: h.Name, Since: h.First}) {
		if byRV[ch.ResourceVersion] {
			for _, f := range ch.Fields {
				fields[f.Path+": "+f.Old+" -> "+f.New]++
			}
		}
	}
	if len(fields) == 0 {
		return "; the writes changed no field the stream compares (timestamps, resourceVersion and managedFields are set aside)"
	}
	return "; fields changed (times):\n" + indent(topN(fields, 6))
}

// hotLoop is the moment one object crossed the hot-loop threshold.
type hotLoop struct {
	Namespace, Kind, Name string
	// scope is the Case namespace of the object (Write.scope).
	scope string
	// First and At are the first write in the window and the write that crossed the threshold.
	First, At time.Time
	// N is the number of writes in the window; Writers counts them by writer and verb.
	N       int
	Writers map[string]int
	writes  []Write
}

func (h hotLoop) String() string {
	var w []string
	for k, n := range h.Writers {
		w = append(w, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(w)
	return fmt.Sprintf("oracle %s: %s/%s was written %d times within %s, at 10/s or more throughout (%s to %s): %s", HotLoop, h.Kind, h.Name, h.N,
		h.At.Sub(h.First).Round(time.Millisecond), h.First.Format("15:04:05.000"), h.At.Format("15:04:05.000"), strings.Join(w, ", "))
}

// hotLoops keeps, per object incarnation (kind, namespace, name and uid), the writes of the last 1.5 s and
// the first crossing of the threshold. Guarded by the recorder's lock.
type hotLoops struct {
	// uid is the uid of each name's latest incarnation (kind/namespace/name), which a write that names no
	// uid (a create the API server refused, an apply) is counted against.
	uid map[string]types.UID
	// rv is each object's resourceVersion after its latest recorded write.
	rv map[string]string
	// nsSeq counts the writes that changed an object, per namespace, and nsLog keeps the last 1.5 s of
	// them; lastSeq is the count after each object's latest write.
	nsSeq   map[string]int64
	nsLog   map[string][]nsWrite
	lastSeq map[string]int64
	// writers holds every writer of each object.
	writers map[string]map[string]bool
	recent  map[string][]Write
	tripped map[string]hotLoop
}

func newHotLoops() *hotLoops {
	return &hotLoops{uid: map[string]types.UID{}, rv: map[string]string{}, nsSeq: map[string]int64{}, nsLog: map[string][]nsWrite{}, lastSeq: map[string]int64{}, writers: map[string]map[string]bool{}, recent: map[string][]Write{}, tripped: map[string]hotLoop{}}
}

// observe adds a write and notes the first time its object crosses the threshold.
func (h *hotLoops) observe(w Write) {
	if w.Name == "" {
		return
	}
	id := h.incarnation(w)
	if w.Err == nil && w.ResourceVersion != "" {
		if h.rv[id] == w.ResourceVersion {
			return // a no-op: the object did not change, so no watch event can answer it
		}
		h.rv[id] = w.ResourceVersion
	}
	// An object of the namespace changed since this object's previous write by a writer that does not
	// write this object: the object is carried along by a progression (pods coming up, claims binding), not
	// answering its own writers.
	if h.interrupted(id, w) {
		h.recent[id] = nil
	}
	if w.Err == nil {
		h.nsSeq[w.scope]++
		log := append(h.nsLog[w.scope], nsWrite{seq: h.nsSeq[w.scope], id: id, writer: w.writer(), at: w.Time})
		i := 0
		for i < len(log) && w.Time.Sub(log[i].at) >= hotLoopSlice*hotLoopSlices {
			i++
		}
		h.nsLog[w.scope] = log[i:]
	}
	h.lastSeq[id] = h.nsSeq[w.scope]
	span := hotLoopSlice * hotLoopSlices
	// Writes arrive in the order their recording finished, which is not always their Time's: two writers of
	// one object record concurrently, and on a loaded machine one can be half a second behind. So the
	// writes are kept in Time order and judged against the latest of them.
	ws := append(h.recent[id], w)
	slices.SortStableFunc(ws, func(a, b Write) int { return a.Time.Compare(b.Time) })
	latest := ws[len(ws)-1].Time
	i := 0
	for i < len(ws) && latest.Sub(ws[i].Time) >= span {
		i++
	}
	ws = ws[i:]
	h.recent[id] = ws
	if _, done := h.tripped[id]; done || len(ws) < hotLoopPerSlice*hotLoopSlices {
		return
	}
	var per [hotLoopSlices]int
	for _, x := range ws {
		per[latest.Sub(x.Time)/hotLoopSlice]++
	}
	for _, n := range per {
		if n < hotLoopPerSlice {
			return
		}
	}
	writers := map[string]int{}
	for _, x := range ws {
		writers[x.writer()+" "+string(x.Verb)]++
	}
	h.tripped[id] = hotLoop{Namespace: w.Namespace, scope: w.scope, Kind: w.Kind, Name: w.Name, First: ws[0].Time, At: latest, N: len(ws), Writers: writers, writes: append([]Write(nil), ws...)}
}

// incarnation names the object incarnation w wrote: "kind/namespace/name uid". A write that names no uid
// is counted against the name's latest incarnation; one that succeeded with a new uid makes it the latest.
func (h *hotLoops) incarnation(w Write) string {
	name := w.Kind + "/" + w.Namespace + "/" + w.Name
	uid := w.UID
	switch {
	case uid == "":
		uid = h.uid[name]
	case w.Err == nil:
		h.uid[name] = uid
	}
	return name + " " + string(uid)
}

// nsWrite is a write that changed an object, in its namespace's order.
type nsWrite struct {
	seq        int64
	id, writer string
	at         time.Time
}

// interrupted reports whether, since object id's previous write, another object of w's namespace was
// changed by a writer that never wrote id.
func (h *hotLoops) interrupted(id string, w Write) bool {
	writers := h.writers[id]
	if writers == nil {
		writers = map[string]bool{}
		h.writers[id] = writers
	}
	writers[w.writer()] = true
	for _, x := range h.nsLog[w.scope] {
		if x.seq > h.lastSeq[id] && x.id != id && !writers[x.writer] {
			return true
		}
	}
	return false
}

// hotLoopsIn returns the crossings in namespace ns at or after since, earliest first.
func (r *recorder) hotLoopsIn(ns string, since time.Time) []hotLoop {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []hotLoop
	for _, h := range r.hot.tripped {
		if h.scope == ns && !h.At.Before(since) {
			out = append(out, h)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].At.Before(out[j].At) })
	return out
}
