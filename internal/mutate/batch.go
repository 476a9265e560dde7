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
	"slices"
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
	fmt.Fprintf(r.out, "running %d mutants, %d test processes at a time: each schema mutant a run of one spec, up to %d runs a process, "+
		"through the specs that cover it until one fails\n", len(todo)-done, r.jobs, batchRuns)
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

// batchRuns is how many runs of one spec, a mutant each, one test process of the schema makes. A run that
// kills its mutant ends its process (Ginkgo repeats a spec only while it passes), and the runs after it
// start again in a new one, so a longer batch only saves boots while its mutants survive the spec.
const batchRuns = 10

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

// scheduler hands out batches of schema mutants, each of one spec, and moves each mutant on through the
// specs that cover it (fastest alone first) until one fails it or all have passed.
type scheduler struct {
	r   *runner
	bin string
	ms  []Mutant
	// specs are each mutant's covering specs, fastest alone first; at the index of the next one it runs.
	specs map[int][]string
	at    map[int]int
	// queue holds the mutants waiting for each spec; solo those that must run alone in a process, with
	// their spec.
	queue map[string][]int
	solo  []int
	// single is set once the suite turns out to run a spec once however many runs are asked for.
	single bool

	mu       sync.Mutex
	cond     *sync.Cond
	inflight int
	err      error
	done     int
	total    int
	// processes and runs count the test processes and the runs they made; boots their BeforeSuite's time.
	processes, runs int
}

// schemaRuns judges the schema mutants of todo with the compiled schema bin, c.jobs processes at once.
func (r *runner) schemaRuns(bin string, ms []Mutant, todo []int, done *int, total int) (processes, runs int, err error) {
	s := &scheduler{r: r, bin: bin, ms: ms, specs: map[int][]string{}, at: map[int]int{}, queue: map[string][]int{}, total: total}
	s.cond = sync.NewCond(&s.mu)
	s.done = *done
	for _, i := range todo {
		if ms[i].ID == 0 || ms[i].Status != NotRun {
			continue
		}
		specs := slices.Clone(ms[i].Specs)
		slices.SortStableFunc(specs, func(a, b string) int { return int(r.alone[a] - r.alone[b]) })
		s.specs[i] = specs
		s.enqueue(i)
	}
	var wg sync.WaitGroup
	for range max(r.jobs, 1) {
		wg.Go(func() {
			for {
				spec, batch := s.take()
				if batch == nil {
					return
				}
				outs, err := r.batch(bin, spec, batch, ms)
				s.finish(spec, batch, outs, err)
			}
		})
	}
	wg.Wait()
	*done = s.done
	return s.processes, s.runs, s.err
}

// enqueue puts mutant i in the queue of its next spec, or alone when it must be its process's only run.
// Called with s.mu held or before the workers start.
func (s *scheduler) enqueue(i int) {
	if s.ms[i].Solo || s.single {
		s.solo = append(s.solo, i)
		return
	}
	spec := s.specs[i][s.at[i]]
	s.queue[spec] = append(s.queue[spec], i)
}

// take hands out the next batch: a solo mutant, else up to batchRuns mutants of the spec with the longest
// queue. It waits while batches in flight may queue more, and returns nil when nothing is left to run.
func (s *scheduler) take() (string, []int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		if s.err != nil || s.r.ctx.Err() != nil {
			return "", nil
		}
		if len(s.solo) > 0 {
			i := s.solo[0]
			s.solo = s.solo[1:]
			s.inflight++
			return s.specs[i][s.at[i]], []int{i}
		}
		spec := ""
		for sp, q := range s.queue {
			if len(q) > len(s.queue[spec]) || (len(q) == len(s.queue[spec]) && len(q) > 0 && s.r.alone[sp] < s.r.alone[spec]) {
				spec = sp
			}
		}
		if q := s.queue[spec]; len(q) > 0 {
			n := min(len(q), batchRuns)
			batch := slices.Clone(q[:n])
			s.queue[spec] = q[n:]
			s.inflight++
			return spec, batch
		}
		if s.inflight == 0 {
			return "", nil
		}
		s.cond.Wait()
	}
}

// finish applies a batch's outcomes: a passed run moves its mutant to its next spec (or makes it a
// survivor after the last), a failed one kills it, a run not judged goes back to the queue.
func (s *scheduler) finish(spec string, batch []int, outs []runOutcome, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.cond.Broadcast()
	s.inflight--
	if err != nil {
		if s.err == nil {
			s.err = err
		}
		return
	}
	s.processes++
	for k, i := range batch {
		o := outs[k]
		m := &s.ms[i]
		m.Run += o.took
		if o.ran {
			s.runs++
		}
		switch o.verdict {
		case passed:
			m.Ran++
			if s.at[i]++; s.at[i] == len(s.specs[i]) {
				m.Status = Survived
				s.report(i)
			} else {
				s.enqueue(i)
			}
		case Killed, TimedOut:
			m.Ran++
			m.Status, m.Detail = o.verdict, o.detail
			s.report(i)
		default:
			if o.solo {
				s.ms[i].Solo = true
			}
			if o.single {
				s.single = true
			}
			s.enqueue(i)
		}
	}
}

// report prints the line of a judged mutant (called with s.mu held).
func (s *scheduler) report(i int) {
	s.done++
	fmt.Fprintln(s.r.out, progress(s.done, s.total, s.ms[i]))
}

// verdict is what became of one run: passed, Killed or TimedOut, or notJudged (it runs again).
type verdict = Status

const (
	passed    verdict = "passed"
	notJudged verdict = ""
)

// runOutcome is one run of a batch.
type runOutcome struct {
	verdict verdict
	detail  string
	took    time.Duration
	// ran says the run began; solo asks for it to run again alone in a process, single for every run
	// after it (the suite runs a spec once however many runs are asked).
	ran, solo, single bool
}

// watcher reads a test process's output as it comes: it keeps it, and passes each marker line
// (mutant.Marker) to markers.
type watcher struct {
	mu      sync.Mutex
	out     bytes.Buffer
	partial []byte
	markers chan mutant.Marker
	all     []mutant.Marker
	at      []time.Time
}

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

// batch runs spec in one test process of the schema bin, a run for each mutant of batch (indices into ms),
// each run limited to 3 times the spec's run alone (at least 2 minutes; -timeout when set), and judges
// each run. Errors: the process could not run, or the command was interrupted.
func (r *runner) batch(bin, spec string, batch []int, ms []Mutant) ([]runOutcome, error) {
	n := len(batch)
	ids := make([]string, n)
	for k, i := range batch {
		ids[k] = strconv.Itoa(ms[i].ID)
	}
	limit := r.timeout
	if limit == 0 {
		limit = max(3*r.alone[spec], 2*time.Minute)
	}
	dir, err := os.MkdirTemp(r.work, "batch-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	report := filepath.Join(dir, "suite.json")
	total := time.Duration(n)*limit + time.Minute
	args := []string{"-test.timeout=" + total.String(), "-ginkgo.timeout=" + total.String(), "-ginkgo.label-filter=" + r.labels,
		"-ginkgo.focus=" + focus(r.description, []string{spec}), "-ginkgo.fail-on-empty", "-ginkgo.no-color", "-ginkgo.json-report=" + report}
	ctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	w := &watcher{markers: make(chan mutant.Marker, 64)}
	cmd := exec.Command(bin, args...)
	cmd.Dir = r.dir
	cmd.Env = append(os.Environ(), "ENSEMBLE_ARTIFACTS="+filepath.Join(dir, "artifacts"), mutant.Env+"="+strings.Join(ids, "|"))
	cmd.Stdout, cmd.Stderr = w, w
	// The watchdog ends the process when its current run passes the limit: that run timed out.
	timedOut := 0
	stop := make(chan struct{})
	watchdog := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(watchdog)
		run := 1
		t := time.NewTimer(limit)
		defer t.Stop()
		for {
			select {
			case m := <-w.markers:
				if m.Kind == mutant.Begins && m.Run > run {
					run = m.Run
					t.Reset(limit)
				}
			case <-t.C:
				timedOut = run
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
		return nil, errors.New("interrupted")
	}
	code, ok := proc.ExitCode(err)
	if !ok && timedOut == 0 {
		return nil, fmt.Errorf("%s: %w", filepath.Base(bin), err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	reports, repErr := ginkgoreport.Read(report)
	return judgeBatch(spec, n, batchRun{code: code, timedOut: timedOut, reports: reports, reportErr: repErr,
		markers: w.all, at: w.at, start: start, end: end, output: w.out.String()})
}

// batchRun is what a batch's process left: its exit code, the run the watchdog ended (0: none), its
// report (or why there is none), its markers with the times they came, and its output.
type batchRun struct {
	code, timedOut int
	reports        []types.Report
	reportErr      error
	markers        []mutant.Marker
	at             []time.Time
	start, end     time.Time
	output         string
}

// judgeBatch turns a batch's process into each run's outcome. Ginkgo repeats the spec while it passes, so
// the runs before the one the process ended in passed, and the ones after it were not reached. The run it
// ended in failed (killed), ran past its limit (timed out), or could not begin because of the run before
// it (not judged; the one before failed when its managers did not stop). A process that passed every run
// and failed anyway (an AfterSuite, the suite's stop) cannot say which mutant failed it: each of its runs
// goes again alone.
func judgeBatch(spec string, n int, b batchRun) ([]runOutcome, error) {
	outs := make([]runOutcome, n)
	begun := 1
	began := map[int]time.Time{1: b.start}
	unjudged := map[int]string{}
	failedAfter := map[int]string{}
	for k, m := range b.markers {
		switch m.Kind {
		case mutant.Begins:
			begun = max(begun, m.Run)
			if m.Run > 1 {
				began[m.Run] = b.at[k]
			}
		case mutant.Unjudged:
			unjudged[m.Run] = m.Why
		case mutant.FailedAfter:
			failedAfter[m.Run] = m.Why
		}
	}
	if b.timedOut > 0 {
		begun = b.timedOut
	}
	// took is run k's share of the process: from its beginning to the next's, the last to the end.
	for k := 1; k <= n; k++ {
		if t, ok := began[k]; ok && k <= begun {
			next, ok := began[k+1]
			if !ok || k == begun {
				next = b.end
			}
			outs[k-1].took, outs[k-1].ran = next.Sub(t), true
		}
	}
	sr, found := ginkgoreport.It(b.reports, spec)
	if b.reportErr == nil && !found {
		return nil, fmt.Errorf("the suite's report has no spec %q: the focus selects none (%s)", spec, suiteFailure(b.reports, b.output))
	}
	ended := begun // the run the process ended in
	failed := true
	detail := ""
	switch {
	case b.reportErr == nil && found && sr.State.Is(types.SpecStatePassed):
		if n > 1 && sr.MaxMustPassRepeatedly != n {
			// The suite ran the spec once: run 1 is judged, the others run again, each alone.
			outs[0].verdict = passed
			for k := 1; k < n; k++ {
				outs[k] = runOutcome{single: true}
			}
			return outs, nil
		}
		ended, failed = n, false
		if b.code != 0 {
			detail = suiteFailure(b.reports, b.output)
			if n > 1 {
				for k := range outs {
					outs[k].verdict, outs[k].solo = notJudged, true
				}
				return outs, nil
			}
			failed = true
		}
	case b.reportErr == nil && found && sr.NumAttempts > 0:
		ended = sr.NumAttempts
		detail = fmt.Sprintf("[%s] %s: %s", strings.ToUpper(sr.State.String()), textout.Cut(spec, 100), firstLine(sr.Failure.Message))
	case b.reportErr == nil:
		// The spec never ran: BeforeSuite failed, under run 1's mutant.
		ended, detail = 1, suiteFailure(b.reports, b.output)
	default:
		detail = deathDetail(b.code, b.output)
	}
	if b.timedOut > 0 {
		// The run the watchdog ended, even when the report names the next: a run that hangs as its
		// managers stop for the next has not handed over.
		ended, failed = b.timedOut, true
	}
	ended = min(max(ended, 1), n)
	for k := 1; k < ended; k++ {
		outs[k-1].verdict = passed
	}
	if !failed {
		outs[ended-1].verdict = passed
		return outs, nil
	}
	switch {
	case b.timedOut == ended:
		outs[ended-1].verdict, outs[ended-1].detail = TimedOut, detail
	case unjudged[ended] != "":
		outs[ended-1].verdict = notJudged
	case failedAfter[ended-1] != "":
		outs[ended-2].verdict, outs[ended-2].detail = Killed, "[FAILED after its spec] "+failedAfter[ended-1]
		outs[ended-1].verdict = notJudged
	default:
		outs[ended-1].verdict, outs[ended-1].detail = Killed, detail
	}
	return outs, nil
}

// suiteFailure names what failed a suite whose spec passed or never ran: a failed suite node, a special
// reason, else the output's first failure line.
func suiteFailure(reports []types.Report, output string) string {
	for _, rep := range reports {
		for _, sr := range rep.SpecReports {
			if sr.LeafNodeType != types.NodeTypeIt && sr.Failed() {
				return fmt.Sprintf("[%s] %s: %s", strings.ToUpper(sr.State.String()), sr.LeafNodeType, firstLine(sr.Failure.Message))
			}
		}
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
