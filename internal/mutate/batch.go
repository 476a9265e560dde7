package mutate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/onsi/ginkgo/v2/types"

	"github.com/ensembletest/ensemble/internal/ginkgoreport"
	"github.com/ensembletest/ensemble/internal/proc"
	"github.com/ensembletest/ensemble/internal/suitebin"
	"github.com/ensembletest/ensemble/internal/textout"
	"github.com/ensembletest/ensemble/suite/mutant"
)

// judge judges the mutants of todo (indices into ms): it builds the mutant schema, compiles the suite
// once with it, runs its mutants as runs of one spec in a test process, and compiles each mutant the schema
// cannot hold alone, as before. It fills h's schema figures.
func (r *runner) judge(ms []Mutant, todo []int, h *Header) error {
	began := time.Now()
	prog, err := loadProgram(r.ctx, r.pkg)
	var files map[string][]byte
	if err != nil {
		if r.ctx.Err() != nil {
			return err
		}
		fmt.Fprintf(r.out, "mutant schema: none (%v): every mutant is compiled alone\n", err)
		for _, i := range todo {
			ms[i].Alone = "no schema: " + err.Error()
		}
	} else {
		res, err := buildSchema(prog, ms, todo)
		if err != nil {
			return err
		}
		files = res.files
	}
	fmt.Fprintf(r.out, "mutant schema: rewritten in %s; compiling %s with %s overlaid\n", round(time.Since(began)), r.suite, textout.Count(len(files), "file", "files"))
	bin, took, err := r.compileSchema(ms, files)
	if err != nil {
		return err
	}
	h.Schema = took
	var alone []int
	done := 0
	for _, i := range todo {
		switch {
		case ms[i].Status == NotViable || ms[i].Status == Broken:
			done++
			fmt.Fprintln(r.out, progress(done, len(todo), ms[i]))
		case ms[i].ID != 0:
			h.SchemaMutants++
		default:
			alone = append(alone, i)
		}
	}
	h.Alone = len(alone)
	fmt.Fprintf(r.out, "mutant schema: %d of %d mutants as switches, compiled once in %s; %d compiled alone, %d not viable\n",
		h.SchemaMutants, len(todo), round(took), len(alone), done)
	for _, i := range alone {
		fmt.Fprintf(r.out, "  compiled alone: %s %s: %s\n", ms[i].Pos(), ms[i].Kind, ms[i].Alone)
	}
	fmt.Fprintf(r.out, "running %d mutants, %d test processes at a time, up to %d schema mutants a process, each a run of each spec "+
		"that covers it\n", len(todo)-done, r.jobs, batchRuns)
	if bin != "" {
		if h.Processes, h.Runs, err = r.schemaRuns(bin, ms, todo, &done, len(todo)); err != nil {
			return err
		}
	}
	var mu sync.Mutex
	return each(r.jobs, len(alone), func(k int) error {
		i := alone[k]
		m, err := r.mutant(i, ms[i])
		mu.Lock()
		defer mu.Unlock()
		ms[i] = m
		done++
		fmt.Fprintln(r.out, progress(done, len(todo), m))
		return err
	})
}

// compileSchema writes the rewritten files under the work directory and compiles the suite once with them
// overlaid. A build error in a rewritten file sends that file's mutants to be compiled alone and the
// suite is compiled again without it. It returns the binary ("" when no file is left) and the time the
// compiles took.
func (r *runner) compileSchema(ms []Mutant, files map[string][]byte) (string, time.Duration, error) {
	dir := filepath.Join(r.work, "schema")
	bin := filepath.Join(dir, "suite.test")
	var took time.Duration
	for len(files) > 0 {
		replace := map[string]string{}
		byOverlay := map[string]string{}
		for abs, text := range files {
			rel := relTo(abs)
			file := filepath.Join(dir, "src", filepath.FromSlash(rel))
			if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
				return "", took, err
			}
			if err := os.WriteFile(file, text, 0o644); err != nil {
				return "", took, err
			}
			replace[abs], byOverlay[file] = file, abs
		}
		overlay, _ := json.Marshal(map[string]map[string]string{"Replace": replace})
		ov := filepath.Join(dir, "overlay.json")
		if err := os.WriteFile(ov, overlay, 0o644); err != nil {
			return "", took, err
		}
		res := command(r.ctx, buildLimit, "", nil, "go", "test", "-c", "-o", bin, "-overlay="+ov, r.dir)
		took += res.took
		if res.err != nil {
			return "", took, res.err
		}
		if res.code == 0 {
			return bin, took, nil
		}
		// The files the errors name leave the schema; none named, every file does.
		bad := map[string]string{}
		for _, l := range strings.Split(res.out, "\n") {
			if !compileLine.MatchString(l) {
				continue
			}
			for file, abs := range byOverlay {
				if strings.HasPrefix(l, file+":") && bad[abs] == "" {
					bad[abs] = relTo(abs) + strings.TrimPrefix(l, file)
				}
			}
		}
		if len(bad) == 0 {
			for abs := range files {
				bad[abs] = suitebin.Tail(res.out, 1)
			}
		}
		for abs, why := range bad {
			rel := relTo(abs)
			for i := range ms {
				if ms[i].ID != 0 && ms[i].File == rel {
					ms[i].ID, ms[i].Solo, ms[i].Alone = 0, false, "its file's schema does not compile: "+why
				}
			}
			delete(files, abs)
		}
		fmt.Fprintf(r.out, "mutant schema: %d files do not compile as switches, their mutants are compiled alone; compiling again\n", len(bad))
	}
	return "", took, nil
}

// relTo is abs relative to the module root (the working directory), slash-separated.
func relTo(abs string) string {
	wd, _ := os.Getwd()
	if rel, err := filepath.Rel(wd, abs); err == nil {
		return filepath.ToSlash(rel)
	}
	return abs
}

// batch is one test process of the schema: its specs, each run once per mutant (in this order, a mutant
// a run), but the runs skip holds: by spec, the runs (from 1) whose mutant the spec does not cover, which
// fail at once with mutant.ErrDone (mutant.SkipEnv).
type batch struct {
	specs   []string
	mutants []int // indices into the mutants
	skip    map[string][]int
}

// cell is one run of one spec in a batch: the run of its mutant (from 1).
type cell struct {
	spec string
	run  int
}

// verdict is what became of one cell: passed, Killed or TimedOut.
type verdict = Status

// passed is the verdict of a cell whose spec passed under its mutant.
const passed verdict = "passed"

// outcome is one judged cell.
type outcome struct {
	verdict verdict
	detail  string
}

// batchResult is what a batch's process says of its cells: the judged ones (a cell left out runs again
// elsewhere), each cell's time, and whether each of its mutants must run again alone (solo: the process
// failed with every run passing) or every run must (single: the suite ran a spec once when more runs were
// asked for).
type batchResult struct {
	cells        map[cell]outcome
	took         map[cell]time.Duration
	solo, single bool
	// lost is the run a signal from outside the command ended (SIGINT, SIGTERM, SIGKILL: a user, a
	// neighbour's pkill, the OOM killer), nil when none did: no verdict, and it runs again.
	lost *cell
	// setup is the failure of a BeforeSuite that failed before any spec ran ("" when none did), which also
	// kills run 1's mutant in cells: a kube-apiserver that did not come up on a busy machine says nothing of
	// the mutants, so the scheduler first runs the batch's mutants again in another process, once.
	setup string
}

// interrupted says whether the report has one of specs interrupted (Ginkgo's state after a SIGINT or
// SIGTERM).
func interrupted(reports []types.Report, specs []string) bool {
	for _, spec := range specs {
		if sr, ok := ginkgoreport.It(reports, spec); ok && sr.State.Is(types.SpecStateInterrupted) {
			return true
		}
	}
	return false
}

// suiteNodeFailed says whether a suite node (BeforeSuite, AfterSuite, a ReportAfterSuite) failed, with
// its failure.
func suiteNodeFailed(reports []types.Report) (string, bool) {
	for _, rep := range reports {
		for _, sr := range rep.SpecReports {
			if sr.LeafNodeType != types.NodeTypeIt && sr.Failed() {
				return nodeFailure(sr), true
			}
		}
	}
	return "", false
}

// nodeFailure is a failed suite node's failure on one line: its state, its kind and the first line of its
// message.
func nodeFailure(sr types.SpecReport) string {
	return fmt.Sprintf("[%s] %s: %s", strings.ToUpper(sr.State.String()), sr.LeafNodeType, firstLine(sr.Failure.Message))
}

// setupFailure is the failure of a BeforeSuite (or SynchronizedBeforeSuite) that failed (nodeFailure); ""
// when none did.
func setupFailure(reports []types.Report) string {
	for _, rep := range reports {
		for _, sr := range rep.SpecReports {
			if sr.LeafNodeType.Is(types.NodeTypeBeforeSuite|types.NodeTypeSynchronizedBeforeSuite) && sr.Failed() {
				return nodeFailure(sr)
			}
		}
	}
	return ""
}

// suiteFailure names what failed a suite whose spec passed or never ran: a failed suite node, a special
// reason, else the output's first failure line.
func suiteFailure(reports []types.Report, output string) string {
	if detail, failed := suiteNodeFailed(reports); failed {
		return detail
	}
	for _, rep := range reports {
		for _, reason := range rep.SpecialSuiteFailureReasons {
			return "suite: " + reason
		}
	}
	return deathDetail(1, output)
}

// deathLine is where a line says why a Go process died (after Ginkgo's progress marks, say).
var deathLine = regexp.MustCompile(`panic: |fatal error: |\[(FAIL|PANICKED|TIMEDOUT|INTERRUPTED)\] |--- FAIL`)

// deathDetail says why a test process ended without a report: its first panic or failure line, from
// where it says so, else its exit code.
func deathDetail(code int, output string) string {
	for _, l := range strings.Split(output, "\n") {
		if i := deathLine.FindStringIndex(l); i != nil {
			return textout.Cut(strings.TrimSpace(l[i[0]:]), 200)
		}
	}
	return fmt.Sprintf("the test process exited %d without a report", code)
}

// firstLine is s's first non-empty line.
func firstLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			return textout.Cut(l, 200)
		}
	}
	return ""
}

// watcher reads a test process's output as it comes: it keeps it, and passes each marker line
// (mutant.Marker) to markers, with the time it came.
type watcher struct {
	mu      sync.Mutex
	out     bytes.Buffer
	partial []byte
	markers chan mutant.Marker
	all     []mutant.Marker
	at      []time.Time
}

// Write keeps b and hands on each marker line it completes; it never fails.
func (w *watcher) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.out.Write(b)
	w.partial = append(w.partial, b...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			break
		}
		line := string(w.partial[:i])
		w.partial = w.partial[i+1:]
		if m, ok := mutant.ParseMarker(line); ok {
			w.all = append(w.all, m)
			w.at = append(w.at, time.Now())
			select {
			case w.markers <- m:
			default:
			}
		}
	}
	return len(b), nil
}

// limit is the longest one run of spec may take: -timeout, else 3 times the spec's run alone (its boot
// included), at least 2 minutes.
func (r *runner) limit(spec string) time.Duration {
	if r.timeout > 0 {
		return r.timeout
	}
	return max(3*r.alone[spec], 2*time.Minute)
}

// run runs batch b in one test process of the schema bin and judges its cells. A watchdog ends the process
// when its current run passes the limit of its spec: that run timed out. Errors: the process could not
// run, the command was interrupted, or the report names none of the batch's specs.
func (r *runner) run(bin string, b batch, ms []Mutant) (batchResult, error) {
	n := len(b.mutants)
	ids := make([]string, n)
	for k, i := range b.mutants {
		ids[k] = strconv.Itoa(ms[i].ID)
	}
	dir, err := os.MkdirTemp(r.work, "batch-")
	if err != nil {
		return batchResult{}, err
	}
	defer os.RemoveAll(dir)
	report := filepath.Join(dir, "suite.json")
	var total time.Duration
	for _, spec := range b.specs {
		total += time.Duration(n-len(b.skip[spec])) * r.limit(spec)
	}
	total += time.Minute
	args := []string{"-test.timeout=" + total.String(), "-ginkgo.timeout=" + total.String(), "-ginkgo.label-filter=" + r.labels,
		"-ginkgo.focus=" + focus(r.description, b.specs), "-ginkgo.fail-on-empty", "-ginkgo.no-color", "-ginkgo.json-report=" + report}
	env := []string{"ENSEMBLE_ARTIFACTS=" + filepath.Join(dir, "artifacts"), mutant.Env + "=" + strings.Join(ids, "|")}
	// Flake attempts, every run going on to the next (the harness fails a run that passed on purpose):
	// each spec runs once per mutant, whatever the runs before it did.
	args = append(args, "-ginkgo.flake-attempts="+strconv.Itoa(n))
	env = append(env, mutant.RetryEnv+"=1")
	if len(b.skip) > 0 {
		skip, _ := json.Marshal(b.skip)
		env = append(env, mutant.SkipEnv+"="+string(skip))
	}
	ctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	w := &watcher{markers: make(chan mutant.Marker, 256)}
	cmd := exec.Command(bin, args...)
	cmd.Dir = r.dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = w, w
	// The process holds a boot token until its first run of a spec begins (its BeforeSuite done) or it ends.
	select {
	case r.boots <- struct{}{}:
	case <-r.ctx.Done():
		return batchResult{}, errors.New("interrupted")
	}
	var booted sync.Once
	boot := func() { booted.Do(func() { <-r.boots }) }
	defer boot()
	var timedOut *cell
	stop := make(chan struct{})
	watchdog := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(watchdog)
		current := cell{spec: b.specs[0], run: 1}
		t := time.NewTimer(r.limit(current.spec))
		defer t.Stop()
		for {
			select {
			case m := <-w.markers:
				if m.Kind == mutant.Begins && m.Spec != "" {
					boot()
					current = cell{spec: m.Spec, run: m.Run}
					t.Reset(r.limit(m.Spec))
				}
			case <-t.C:
				timedOut = &current
				cancel()
				return
			case <-stop:
				return
			}
		}
	}()
	err = proc.Run(ctx, cmd)
	end := time.Now()
	close(stop)
	<-watchdog
	if r.ctx.Err() != nil {
		return batchResult{}, errors.New("interrupted")
	}
	code, ok := proc.ExitCode(err)
	if !ok && timedOut == nil {
		return batchResult{}, fmt.Errorf("%s: %w", filepath.Base(bin), err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	reports, repErr := ginkgoreport.Read(report)
	return judgeBatch(b, process{code: code, timedOut: timedOut, reports: reports, reportErr: repErr,
		markers: w.all, at: w.at, start: start, end: end, output: w.out.String()})
}

// process is what a batch's test process left: its exit code, the run the watchdog ended (nil: none), its
// report (or why there is none), its markers with the times they came, and its output.
type process struct {
	code       int
	timedOut   *cell
	reports    []types.Report
	reportErr  error
	markers    []mutant.Marker
	at         []time.Time
	start, end time.Time
	output     string
}

// judgeBatch judges each cell of a batch from its process. The report says, for each spec, how many runs
// Ginkgo made (flake attempts: each run failed, the harness failing a run that passed on purpose) and
// each run's first failure: mutant.ErrPassed for a run that passed, mutant.ErrDone for a run whose mutant
// had failed before in the process (no verdict), else the failure that kills the run's mutant. The markers
// say which run of which spec the process was in when it hung (the watchdog's: timed out) or died without
// a report (killed), which run could not begin for the run before's leftovers (not judged) and which
// failed after its spec as its managers would not stop (killed; the run after it not judged). A process
// in which a suite node failed (an AfterSuite) asks for each mutant to run again alone; alone, that
// failure kills it. So does a run without its marker, whose spec makes no case of the harness: nothing
// made its mutant active.
func judgeBatch(b batch, p process) (batchResult, error) {
	res := batchResult{cells: map[cell]outcome{}, took: map[cell]time.Duration{}}
	n := len(b.mutants)
	unjudged := map[cell]bool{}
	failedAfter := map[cell]string{}
	ended := map[cell]string{}
	var begun []cell
	var began []time.Time
	for k, m := range p.markers {
		c := cell{spec: m.Spec, run: m.Run}
		switch m.Kind {
		case mutant.Begins:
			if m.Spec != "" {
				begun, began = append(begun, c), append(began, p.at[k])
			}
		case mutant.Ended:
			ended[c] = m.Why
		case mutant.Unjudged:
			unjudged[c] = true
		case mutant.FailedAfter:
			failedAfter[c] = m.Why
		}
	}
	// Each cell's time runs from its beginning to the next's; the first's from the process's start.
	for k, c := range begun {
		from, to := p.start, p.end
		if k > 0 {
			from = began[k]
		}
		if k+1 < len(begun) {
			to = began[k+1]
		}
		res.took[c] += to.Sub(from)
	}
	set := func(c cell, v verdict, detail string) {
		if c.run >= 1 && c.run <= n {
			res.cells[c] = outcome{v, detail}
		}
	}
	// last is the cell the process ended in: the watchdog's, else the last that began (the first spec's
	// first run when none did: the process died booting, under run 1's mutant).
	last := cell{spec: b.specs[0], run: 1}
	if len(begun) > 0 {
		last = begun[len(begun)-1]
	}
	if p.timedOut != nil {
		last = *p.timedOut
	}
	if p.timedOut == nil && (p.code == -1 || interrupted(p.reports, b.specs)) {
		// A signal from outside ended the process: the runs before the one it was in are judged, that one
		// and the ones after it run again.
		res.lost = &last
		if p.reportErr != nil {
			for _, c := range begun {
				if c != last && ended[c] != "" {
					set(c, map[bool]verdict{true: passed, false: Killed}[ended[c] == "passed"],
						"[FAILED] "+textout.Cut(c.spec, 100)+" (its report lost: the test process was ended from outside later)")
				}
			}
			return res, nil
		}
	}
	if p.reportErr != nil {
		// No report: the ended markers judge the runs that ended, and the one it ended in died (or hung).
		for _, c := range begun {
			switch {
			case c == last:
			case ended[c] == "passed":
				set(c, passed, "")
			case ended[c] == "failed":
				set(c, Killed, "[FAILED] "+textout.Cut(c.spec, 100)+" (its report lost: the test process died in a later run)")
			}
		}
		if p.timedOut != nil {
			set(last, TimedOut, "[TIMEDOUT] "+textout.Cut(last.spec, 100)+": the run passed its limit, and its process was ended")
		} else {
			set(last, Killed, deathDetail(p.code, p.output))
		}
		return res, nil
	}
	anyRan := false
	for _, spec := range b.specs {
		sr, found := ginkgoreport.It(p.reports, spec)
		if !found {
			return res, fmt.Errorf("the suite's report has no spec %q: the focus selects none (%s)", spec, suiteFailure(p.reports, p.output))
		}
		k := sr.NumAttempts
		if k == 0 {
			continue // not run: the suite failed before it
		}
		anyRan = true
		if n > 1 && sr.MaxFlakeAttempts != n {
			// The suite ran the spec once (it set MustPassRepeatedly itself): run 1 alone is judged.
			res.single = true
			if sr.State.Is(types.SpecStatePassed) {
				set(cell{spec, 1}, passed, "")
			}
			continue
		}
		// Each run's first failure: Ginkgo keeps those of the runs before the last as additional failures
		// "Failure recorded during attempt N:", the last's as the spec's.
		first := map[int]string{}
		for _, af := range sr.AdditionalFailures {
			var at int
			if _, err := fmt.Sscanf(af.Failure.Message, "Failure recorded during attempt %d:", &at); err == nil {
				_, msg, _ := strings.Cut(af.Failure.Message, "\n")
				first[at] = msg
			}
		}
		if !sr.State.Is(types.SpecStatePassed) {
			first[k] = sr.Failure.Message
		}
		for j := 1; j <= k; j++ {
			msg, failed := first[j]
			switch {
			case !failed || strings.Contains(msg, mutant.ErrPassed.Error()):
				set(cell{spec, j}, passed, "")
			case strings.Contains(msg, mutant.ErrDone.Error()):
				// Its mutant failed an earlier run of the process: judged there.
			default:
				state := "FAILED"
				if j == k {
					state = strings.ToUpper(sr.State.String())
				}
				set(cell{spec, j}, Killed, fmt.Sprintf("[%s] %s: %s", state, textout.Cut(spec, 100), firstLine(msg)))
			}
		}
	}
	if !anyRan {
		// No spec ran: BeforeSuite failed, under run 1's mutant (or hung, and the watchdog ended it).
		v := Killed
		if p.timedOut != nil {
			v = TimedOut
		} else {
			res.setup = setupFailure(p.reports)
		}
		set(last, v, suiteFailure(p.reports, p.output))
		return res, nil
	}
	if res.lost != nil {
		keepBefore(res.cells, begun, last)
		return res, nil
	}
	if p.timedOut != nil {
		// The run the watchdog ended timed out, even when the report names the next one (a run that hangs
		// as its managers stop for the next has not handed over); what Ginkgo made of the runs after it
		// (interrupted) is no verdict.
		o := res.cells[last]
		o.verdict = TimedOut
		if o.detail == "" {
			o.detail = "[TIMEDOUT] " + textout.Cut(last.spec, 100) + ": the run passed its limit, and its process was ended"
		}
		keepBefore(res.cells, begun, last)
		res.cells[last] = o
		return res, nil
	}
	for c := range unjudged {
		delete(res.cells, c)
	}
	if n > 1 {
		// A run that began without its marker ran under whichever mutant was active: its spec makes no case
		// of the harness, which switches mutants as a case begins. Each mutant runs again alone.
		marked := map[cell]bool{}
		for _, c := range begun {
			marked[c] = true
		}
		for c := range res.cells {
			if !marked[c] {
				return batchResult{cells: map[cell]outcome{}, took: res.took, solo: true}, nil
			}
		}
	}
	for c, why := range failedAfter {
		set(c, Killed, "[FAILED after its spec] "+why)
		// The run after it failed for it.
		for k, b := range begun {
			if b == c && k+1 < len(begun) {
				delete(res.cells, begun[k+1])
			}
		}
	}
	if detail, failed := suiteNodeFailed(p.reports); failed {
		// A suite node failed (an AfterSuite: the sentinel): which run's mutant failed it is unknown.
		if n > 1 {
			return batchResult{cells: map[cell]outcome{}, took: res.took, solo: true}, nil
		}
		for c, o := range res.cells {
			if o.verdict == passed {
				res.cells[c] = outcome{Killed, detail}
			}
		}
	}
	return res, nil
}

// keepBefore deletes from cells every cell but those that began (begun, in order) before last: the runs a
// process judged before the one it ended in.
func keepBefore(cells map[cell]outcome, begun []cell, last cell) {
	keep := map[cell]bool{}
	for _, c := range begun {
		if c == last {
			break
		}
		keep[c] = true
	}
	for c := range cells {
		if !keep[c] {
			delete(cells, c)
		}
	}
}
