package suite

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/ensembletest/ensemble/internal/recordtb"
)

const timelineNS = "e-timeline-1a2b3"

// timelineLanes are the lanes of timelineHistory, in the page's order: the case first, the unrecorded
// changes last.
var timelineLanes = []string{"case/spec", "opA/cluster", "opB", "opB/shard", "<unrecorded>"}

// timelineHistory is a suite whose recorder and stream hold a small known history in timelineNS: two
// controllers of two managers, a write of opB outside a pass, a gated pass, a rejected write, a write that
// changed nothing, a change no write made, one failure mark (whose text would run as a script if the
// page did not escape it) and the mark of a perturbation point that fired.
func timelineHistory(t *testing.T) (*Suite, time.Time, []mark) {
	t.Helper()
	b := newBroadcast()
	s := &Suite{artifactsDir: t.TempDir(), rec: newRecorder(nil, b, newScopes()), stream: newStream(nil, b, newScopes())}
	t0 := time.Now()
	at := func(ms float64) time.Time { return t0.Add(time.Duration(ms * float64(time.Millisecond))) }
	req := func(name string) ctrl.Request {
		return ctrl.Request{NamespacedName: types.NamespacedName{Namespace: timelineNS, Name: name}}
	}
	pass := func(mgr, ctl, name string, start, end float64, gated bool, err error) {
		s.rec.passLog = append(s.rec.passLog, &Pass{ID: int64(len(s.rec.passLog) + 1), Manager: mgr, Controller: ctl,
			Request: req(name), N: 1, Start: at(start), End: at(end), Gated: gated, Err: err, scope: timelineNS})
	}
	write := func(ms float64, mgr, ctl string, passID int64, verb Verb, sub, kind, name, rv, owner string, err error) {
		s.rec.addWrite(Write{Time: at(ms), Manager: mgr, Controller: ctl, Pass: passID, Verb: verb, Subresource: sub,
			Kind: kind, Namespace: timelineNS, Name: name, ResourceVersion: rv, FieldOwner: owner, Err: err})
	}
	change := func(ms float64, typ ChangeType, kind, name, rv string, fields ...FieldChange) {
		s.stream.log = append(s.stream.log, Change{Seq: int64(len(s.stream.log) + 1), Time: at(ms), Type: typ,
			Kind: kind, Namespace: timelineNS, Name: name, ResourceVersion: rv, Fields: fields, scope: timelineNS})
	}
	write(1, "case", "spec", 0, VerbCreate, "", "Cluster", "a", "10", CaseFieldManager, nil)
	change(2, Added, "Cluster", "a", "10")
	pass("opA", "cluster", "a", 5, 20, false, nil)
	write(15, "opA", "cluster", 1, VerbPatch, "status", "Cluster", "a", "11", "opa", nil)
	change(16, Modified, "Cluster", "a", "11", FieldChange{Path: "status.phase", Old: absent, New: "Ready"})
	pass("opB", "shard", "a-0", 12, 25, false, nil)
	write(22, "opB", "shard", 2, VerbCreate, "", "Shard", "a-0", "12", "opb", nil)
	change(23, Added, "Shard", "a-0", "12")
	pass("opA", "cluster", "a", 30, 40, false, errors.New("conflict"))
	write(38, "opA", "cluster", 3, VerbUpdate, "", "Cluster", "a", "", "opa", errors.New(`Operation cannot be fulfilled on clusters "a": the object has been modified`))
	pass("opB", "shard", "a-9", 50, 50.1, true, nil)
	write(60, "opB", "", 0, VerbPatch, "", "Shard", "a-0", "13", "opb", nil)
	change(61, Modified, "Shard", "a-0", "13", FieldChange{Path: "metadata.labels.ready", Old: absent, New: "true"})
	change(65, Added, "Pod", "a-0-pod", "14")
	write(70, "opA", "cluster", 0, VerbUpdate, "status", "Cluster", "a", "11", "opa", nil)
	return s, t0, []mark{{At: at(45), What: `invariant "one owner" violated: <script>alert("escaped?")</script>` + "\n  more lines"},
		{At: at(37), What: "conflict@opA/cluster:Cluster/a#2 at Cluster/a (update by opA/cluster)", Point: true}}
}

func TestTimelineTrace(t *testing.T) {
	s, since, marks := timelineHistory(t)
	_, tracePath, err := s.writeTimeline(timelineNS, "TestTimeline/trace", since, marks)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(tracePath)
	if err != nil {
		t.Fatal(err)
	}
	var tr struct {
		TraceEvents []struct {
			Name, Cat, Ph, S string
			Ts               float64
			Dur              *float64
			Pid, Tid         int
			Args             map[string]string
		}
		DisplayTimeUnit string
	}
	if err := json.Unmarshal(b, &tr); err != nil {
		t.Fatalf("%s does not parse: %v", tracePath, err)
	}
	if tr.DisplayTimeUnit != "ms" {
		t.Errorf("displayTimeUnit = %q, want ms", tr.DisplayTimeUnit)
	}
	threads := map[int]string{}
	var lanes []string
	count := map[string]int{}
	for _, e := range tr.TraceEvents {
		if e.Pid != 1 {
			t.Errorf("event %q has pid %d, want 1", e.Name, e.Pid)
		}
		switch {
		case e.Ph == "M" && e.Name == "thread_name":
			threads[e.Tid] = e.Args["name"]
			lanes = append(lanes, e.Args["name"])
		case e.Ph == "X":
			if e.Dur == nil || *e.Dur < 0 || e.Ts < 0 {
				t.Errorf("complete event %q: ts %v dur %v, want both present and non-negative", e.Name, e.Ts, e.Dur)
			}
			count[e.Cat]++
		case e.Ph == "i":
			if e.Ts < 0 {
				t.Errorf("instant %q: ts %v", e.Name, e.Ts)
			}
			count[e.Cat+"/"+e.S]++
		}
		if e.Ph != "M" && e.Tid != 0 && threads[e.Tid] == "" {
			t.Errorf("event %q on tid %d, which has no thread_name", e.Name, e.Tid)
		}
	}
	if !slices.Equal(lanes, timelineLanes) {
		t.Errorf("thread names %q, want %q", lanes, timelineLanes)
	}
	want := map[string]int{"pass": 3, "gated": 1, "write/t": 5, "rejected/t": 1, "change/t": 1, "failure/g": 1, "point/g": 1}
	for k, n := range want {
		if count[k] != n {
			t.Errorf("%d events of %s, want %d (all: %v)", count[k], k, n, count)
		}
	}
	// The patch of opA made rv 11; the later update that answered rv 11 again changed nothing.
	var patch, noop string
	for _, e := range tr.TraceEvents {
		if e.Ph == "i" && e.Args["resourceVersion"] == "11" {
			if strings.HasPrefix(e.Name, "patch") {
				patch = e.Args["changed"]
			} else {
				noop = e.Args["changed"]
			}
		}
	}
	if patch != "status.phase: <absent> -> Ready" || !strings.HasPrefix(noop, "nothing") {
		t.Errorf("changed of the patch = %q, of the no-op update = %q: want the change with its resourceVersion, and nothing for the second", patch, noop)
	}
}

// TestTimelineInBrowser opens a timeline page from disk in headless Chrome or Chromium and reads what it shows.
func TestTimelineInBrowser(t *testing.T) {
	s, since, marks := timelineHistory(t)
	htmlPath, _, err := s.writeTimeline(timelineNS, "TestTimeline/in a browser", since, marks)
	if err != nil {
		t.Fatal(err)
	}
	pageURL := (&url.URL{Scheme: "file", Path: htmlPath}).String()
	ctx, events := openHeadless(t, pageURL)
	type shown struct {
		Lanes              []string
		Counts             map[string]int
		WriteTitle         string
		MarkText, MarkLane string
		MarkHeight         float64
		LanesBottom        float64
		// MarkX is where the mark's line is; Tick40 and Tick50 where the 40 ms and 50 ms ticks are.
		MarkX, Tick40, Tick50 float64
	}
	got, err := chromedp.Run(ctx, chromedp.Evaluate[shown](`(() => {
		const kinds = ["write", "pass", "gated", "rejected", "mark", "point", "change"];
		const counts = {};
		for (const k of kinds) counts[k] = document.querySelectorAll('[data-kind="' + k + '"]').length;
		const lanes = [...document.querySelectorAll("[data-lane]")];
		const w = document.querySelector('[data-lane="opB/shard"] [data-kind="write"]');
		const m = document.querySelector('[data-kind="mark"]');
		const tick = label => {
			const t = [...document.querySelectorAll(".tick")].find(e => e.textContent === label);
			return t ? t.getBoundingClientRect().left : -1;
		};
		return {
			lanes: lanes.map(e => e.dataset.lane),
			counts,
			writeTitle: w ? w.title : "",
			markText: m ? m.textContent : "",
			markHeight: m ? m.getBoundingClientRect().height : 0,
			lanesBottom: lanes.length ? lanes[lanes.length - 1].getBoundingClientRect().bottom - lanes[0].getBoundingClientRect().top : 0,
			markX: m ? m.querySelector(".line").getBoundingClientRect().left : 0,
			tick40: tick("40 ms"),
			tick50: tick("50 ms"),
		};
	})()`))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Lanes, timelineLanes) {
		t.Errorf("lanes %q, want %q", got.Lanes, timelineLanes)
	}
	want := map[string]int{"write": 5, "pass": 3, "gated": 1, "rejected": 1, "mark": 1, "point": 1, "change": 1}
	for k, n := range want {
		if got.Counts[k] != n {
			t.Errorf("%d elements of kind %s, want %d (all: %v)", got.Counts[k], k, n, got.Counts)
		}
	}
	for _, d := range []string{"Shard/a-0", "create", "field owner: opb", "pass: #2", "resourceVersion: 12", "changed: Added"} {
		if !strings.Contains(got.WriteTitle, d) {
			t.Errorf("hover details of opB/shard's write do not say %q:\n%s", d, got.WriteTitle)
		}
	}
	if !strings.Contains(got.MarkText, `<script>alert("escaped?")</script>`) {
		t.Errorf("mark text %q: want the failure's text shown as text", got.MarkText)
	}
	if got.MarkHeight < got.LanesBottom {
		t.Errorf("the failure mark is %.0f px tall, the lanes %.0f px: want it drawn across all lanes", got.MarkHeight, got.LanesBottom)
	}
	// The mark is at 45 ms: halfway between the 40 ms and 50 ms ticks, on the same time axis as the lanes.
	if want := (got.Tick40 + got.Tick50) / 2; got.Tick40 < 0 || got.Tick50 < 0 || got.MarkX < want-2 || got.MarkX > want+2 {
		t.Errorf("the 45 ms mark is drawn at x=%.1f, the 40 ms and 50 ms ticks at %.1f and %.1f: want it halfway", got.MarkX, got.Tick40, got.Tick50)
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	dir := os.Getenv("ENSEMBLE_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	}
	shot := filepath.Join(dir, "timeline-test.png")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(shot, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot of %s: %s", htmlPath, shot)
	seen := events()
	if !slices.Contains(seen.requests, pageURL) {
		t.Errorf("the browser reported no request for the page itself (%q): is the network listener wired? saw %q", pageURL, seen.requests)
	}
	for _, u := range seen.requests {
		if u != pageURL {
			t.Errorf("the page requested %s: a timeline must be self-contained", u)
		}
	}
	for _, e := range seen.problems {
		t.Errorf("page: %s", e)
	}
}

// seenInBrowser is what a page did while open: the URLs it requested and its script errors and dialogs.
type seenInBrowser struct{ requests, problems []string }

// noBrowser is the line the timeline's browser test fails with when it finds no Chrome or Chromium.
const noBrowser = "no Chrome or Chromium for the timeline's browser test (CHROME is unset and none of the names chromedp looks for is on PATH): run make test, which finds one or installs Debian's chromium (make browser does only that), or set CHROME=/path/to/chrome"

// openHeadless opens pageURL in a fresh headless Chrome or Chromium and returns the tab's context (ended with
// the test) and what the page did so far. The browser is CHROME when it is set (make test sets it to what
// tools/browser/browser.sh found), else the one chromedp's own lookup finds. No browser fails the test with
// one line that says how to get one. The flags are chromedp's defaults (Puppeteer's: no background networking,
// extensions or sync) and what a root user in a container on a closed network needs besides.
func openHeadless(t *testing.T, pageURL string) (context.Context, func() seenInBrowser) {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-component-update", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1600, 900),
		// Chromium leaves its org.chromium.Chromium.* singleton directory in TMPDIR: the test's own, removed with it.
		chromedp.Env("TMPDIR="+t.TempDir()))
	if chrome := os.Getenv("CHROME"); chrome != "" {
		if _, err := exec.LookPath(chrome); err != nil {
			t.Fatalf("CHROME=%s is not an executable (%v): set CHROME to a Chrome or Chromium binary, or unset it to let chromedp look for one", chrome, err)
		}
		opts = append(opts, chromedp.ExecPath(chrome))
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	var mu sync.Mutex
	var seen seenInBrowser
	ctx, cancel := chromedp.NewContext(alloc, chromedp.WithListener(func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch e := ev.(type) {
		case *network.EventRequestWillBeSent:
			seen.requests = append(seen.requests, e.Request.URL)
		case *runtime.EventExceptionThrown:
			seen.problems = append(seen.problems, "script error: "+e.ExceptionDetails.Text)
		case *page.EventJavascriptDialogOpening:
			seen.problems = append(seen.problems, "dialog opened: "+e.Message)
		}
	}))
	ctx, cancelTimeout := context.WithTimeout(ctx, 60*time.Second)
	t.Cleanup(func() { cancelTimeout(); cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx, chromedp.Navigate(pageURL)); err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			t.Fatal(noBrowser)
		}
		t.Fatalf("opening %s in headless Chrome or Chromium: %v", pageURL, err)
	}
	return ctx, func() seenInBrowser {
		mu.Lock()
		defer mu.Unlock()
		return seenInBrowser{slices.Clone(seen.requests), slices.Clone(seen.problems)}
	}
}

func TestTimelineFilter(t *testing.T) {
	for _, tc := range []struct {
		v      string
		spec   string
		want   bool
		errors bool
	}{
		{"", "anything", false, false},
		{"1", "anything", true, false},
		{"Shard", "Multigres Shard converges", true, false},
		{"^Shard", "Multigres Shard converges", false, false},
		{"(", "", false, true},
	} {
		re, err := timelineFilter(tc.v)
		if tc.errors {
			if err == nil || !strings.Contains(err.Error(), "ENSEMBLE_TIMELINE") || strings.Contains(err.Error(), "\n") {
				t.Errorf("ENSEMBLE_TIMELINE=%q: %v, want one line naming the variable", tc.v, err)
			}
			continue
		}
		if err != nil || (re != nil && re.MatchString(tc.spec)) != tc.want {
			t.Errorf("ENSEMBLE_TIMELINE=%q on %q: %v (err %v), want %v", tc.v, tc.spec, re, err, tc.want)
		}
	}
}

// TestCaseMarks: a failure noted twice is kept once, an invariant's violation is marked at its own time,
// and a failed spec with no mark gets one at the cleanup's time.
func TestCaseMarks(t *testing.T) {
	s, t0, _ := timelineHistory(t)
	p := &recordtb.TB{TestName: "marks"}
	c := &Case{Namespace: timelineNS, t: p, s: s}
	at := t0.Add(time.Second)
	if m := c.failureMarks(at); len(m) != 0 {
		t.Fatalf("a passing spec with no mark has marks %v", m)
	}
	fired := t0.Add(7 * time.Millisecond)
	c.markPoint(fired, "conflict@op#1 at ConfigMap/m (patch by op/configmap)")
	p.Errorf("an assertion failed")
	if m := c.failureMarks(at); len(m) != 2 || !m[0].Point || !m[0].At.Equal(fired) || m[1].Point || !m[1].At.Equal(at) || m[1].What != "the spec failed (see its report)" {
		t.Fatalf("a failed spec with only a point's mark: %v, want the point and one failure at the cleanup's time saying so", m)
	}
	c.marks = nil
	seen := t0.Add(42 * time.Millisecond)
	c.invariants = []*invariant{{name: "one owner", first: &violation{Name: "one owner", Err: errors.New("two owners"), Time: seen}}}
	c.invariantErrors()
	c.invariantErrors()
	c.mark("RequireQuiescent: not quiescent")
	m := c.failureMarks(at)
	if len(m) != 2 || !m[0].At.Equal(seen) || m[0].What != `invariant "one owner" violated: two owners` || m[1].What != "RequireQuiescent: not quiescent" {
		t.Fatalf("marks %v: want the violation once at its own time, then the quiescence failure", m)
	}
}

// TestVerbLetters: the timeline draws each write with its verb's letter; an admission (and a conversion) was
// drawn as a delete, "D".
func TestVerbLetters(t *testing.T) {
	want := map[Verb]string{VerbCreate: "C", VerbUpdate: "U", VerbPatch: "P", VerbApply: "A", VerbDelete: "D",
		VerbDeleteAllOf: "D", VerbAdmit: "W", VerbConvert: "W"}
	for v, letter := range want {
		if got := verbLetter(v); got != letter {
			t.Errorf("verb %s is drawn %q, want %q", v, got, letter)
		}
	}
}
