package suite

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ensembletest/ensemble/suite/mutant"
	"github.com/ensembletest/ensemble/suite/perturb"
)

// Runs is how many runs of each spec ENSEMBLE_PERTURB (perturb.ParseRuns) or ENSEMBLE_MUTANTS (mutant.Env)
// asks of this test process, each of which must pass: make explore runs several points of one spec in one
// process, a point a run, and make mutate several mutants, a mutant a run, so a run pays for its spec and
// not for a boot. It is 1 without either variable, when one does not parse or they disagree (Boot then
// returns the error), and when make mutate's runs are flake attempts instead (mutant.RetryEnv: it passes
// -ginkgo.flake-attempts, which repeats a spec while it fails). Ginkgo's flags cannot make a spec pass more
// than once in a process, so a Ginkgo suite hands the count to Ginkgo itself:
//
//	cfg, rep := GinkgoConfiguration()
//	if n := suite.Runs(); n > 1 {
//		cfg.MustPassRepeatedly = n // left at 0 otherwise, so -ginkgo.flake-attempts still applies
//	}
//	RunSpecs(t, "my operator", cfg, rep)
//
// Ginkgo ends the repetition at the first run that fails; make explore and make mutate run the runs after
// it in a new process. Between two runs of a spec (and, under ENSEMBLE_MUTANTS, between the runs of two
// specs) the harness checks that the earlier run left nothing behind and starts every manager afresh (see
// docs/architecture.md §3 Many points per process).
func Runs() int {
	n, err := runCount()
	if err != nil || mutant.Retrying() {
		return 1
	}
	return n
}

// runCount is how many runs of each spec ENSEMBLE_PERTURB and ENSEMBLE_MUTANTS ask for: the one that asks
// for more than one (both must then agree), else 1. Errors: a variable that does not parse (mutant.SkipEnv's
// too, the runs each spec skips), or the two asking for different counts.
func runCount() (int, error) {
	points, err := perturb.ParseRuns(os.Getenv("ENSEMBLE_PERTURB"))
	if err != nil {
		return 1, fmt.Errorf("suite: ENSEMBLE_PERTURB: %w", err)
	}
	mutants, err := mutant.Runs()
	if err != nil {
		return 1, fmt.Errorf("suite: %w", err)
	}
	// A skip list that does not parse would skip nothing: each run of a spec that does not cover its
	// mutant would run in full, as long as the unmutated spec takes, instead of failing at once.
	if _, err := mutant.ParseSkip(os.Getenv(mutant.SkipEnv)); err != nil {
		return 1, fmt.Errorf("suite: %w", err)
	}
	switch {
	case len(mutants) > 1 && len(points) > 1 && len(mutants) != len(points):
		return 1, fmt.Errorf("suite: ENSEMBLE_PERTURB gives %d runs and %s %d: give both the same count, or one run to either", len(points), mutant.Env, len(mutants))
	case len(mutants) > 1:
		return len(mutants), nil
	}
	return len(points), nil
}

// specRun counts one spec's runs in the process. A run begins with a case of the spec made while none of
// its cases is live, so a spec that makes two cases is still one run.
type specRun struct {
	// n counts the runs begun; live the spec's cases not cleaned up yet.
	n, live int
	// ended are the cases of the runs that ended since the last isolation check.
	ended []*Case
	// managers are the managers running when the spec's first run began: the ones a later run starts afresh,
	// and the only ones it may find running.
	managers []string
}

// beginRun counts a case of spec and returns its run (from 1) and the points ENSEMBLE_PERTURB sets on it:
// the run's own, or with a single run every case's. When the case begins a second or later run of a
// sequence, the runs before it are checked for leftovers (isolation) and the managers running when its first
// run began are started afresh first. Under ENSEMBLE_MUTANTS so is the first run of every spec after the
// process's first, since each run has a mutant of its own (mutant.Begin makes it active between the stop
// and the fresh start). Errors: a run past the sequence's end, a leftover, a manager that could not start
// again, and under mutant.RetryEnv mutant.ErrDone for a run whose mutant failed earlier in the process.
func (s *Suite) beginRun(spec string) (int, []perturb.Point, error) {
	mutating := os.Getenv(mutant.Env) != ""
	s.mu.Lock()
	if s.specRuns == nil {
		s.specRuns = map[string]*specRun{}
	}
	sr := s.specRuns[spec]
	if sr == nil {
		sr = &specRun{}
		s.specRuns[spec] = sr
	}
	fresh := sr.live == 0
	if fresh {
		sr.n++
	}
	if sr.n == 1 && fresh {
		for name := range s.managers {
			sr.managers = append(sr.managers, name)
		}
	}
	if fresh && mutating && mutant.Done(spec, sr.n) {
		// make mutate has judged this run's mutant: the run fails at once, leaving the last run's cases
		// for the next run's isolation check.
		sr.live++
		s.mu.Unlock()
		return sr.n, nil, fmt.Errorf("suite: run %d of %q: %w", sr.n, spec, mutant.ErrDone)
	}
	managers := sr.managers
	sr.live++
	run, ended := sr.n, sr.ended
	before := spec // the spec whose runs the isolation check looks at
	if fresh {
		sr.ended = nil
		// A run under ENSEMBLE_MUTANTS may follow another spec's last run (it is its spec's first, or the
		// runs before it failed at once).
		if prev := s.specRuns[s.lastSpec]; mutating && prev != nil && s.lastSpec != spec {
			before, ended, managers = s.lastSpec, prev.ended, prev.managers
			prev.ended = nil
		}
		s.lastSpec = spec
	}
	s.mu.Unlock()
	switching := fresh && (run > 1 || (mutating && len(s.runs) > 1 && mutant.Began()))
	if len(s.runs) == 1 || !switching {
		if mutating && fresh {
			mutant.Mark(spec, run)
		}
		if len(s.runs) == 1 {
			return run, s.runs[0], nil
		}
	}
	if run > len(s.runs) {
		return run, nil, fmt.Errorf("suite: ENSEMBLE_PERTURB gives %d runs, and %q is starting its run %d: run each spec "+
			"suite.Runs() times (Ginkgo's MustPassRepeatedly), not more", len(s.runs), spec, run)
	}
	if switching {
		if err := s.isolation(ended, managers); err != nil {
			err = fmt.Errorf("suite: run %d of %q cannot begin, since the run of %q before it left something behind that could reach it: %w", run, spec, before, err)
			// Under make mutate the run's own mutant is not to blame: it runs again in another process.
			mutant.Note(mutant.Marker{Spec: spec, Run: run, Kind: mutant.Unjudged, Why: err.Error()})
			return run, nil, err
		}
		if err := s.freshManagers(spec, run, before, managers); err != nil {
			return run, nil, fmt.Errorf("suite: run %d of %q: %w", run, spec, err)
		}
	}
	return run, s.runs[run-1], nil
}

// endRun counts the end of a case of spec, after its cleanup; c is nil when the case was never made. Under
// ENSEMBLE_MUTANTS the end of a run (its last case) is noted with whether it failed (mutant.End), and under
// mutant.RetryEnv a run that passed is failed on purpose.
func (s *Suite) endRun(spec string, c *Case) {
	s.mu.Lock()
	ended := false
	if sr := s.specRuns[spec]; sr != nil {
		sr.live--
		ended = sr.live == 0
		if c != nil {
			sr.ended = append(sr.ended, c)
		}
	}
	s.mu.Unlock()
	if ended && c != nil && os.Getenv(mutant.Env) != "" {
		// Under make mutate's flake attempts a run that passed fails on purpose (mutant.ErrPassed), so
		// that Ginkgo goes on to the next run's mutant.
		if err := mutant.End(spec, c.run, c.t.Failed()); err != nil {
			c.t.Errorf("%v", err)
		}
	}
}

// isolation checks that the cases of ended runs left nothing that could reach a later run: no perturbation
// plan or change trigger of their namespaces, no object a manager's cache holds back for them, no fenced
// manager still running, no manager running but those of managers (the ones running when the first run
// began), no namespace still admitted at the gate, no goroutine the harness started for them, no object in
// their namespaces (once the namespace controller, when it runs, had namespaceGoneBound to delete what came
// after the cleanup) and no cluster-scoped object they claimed. Errors: every leftover, one a line.
func (s *Suite) isolation(cases []*Case, managers []string) error {
	var left []string
	s.mu.Lock()
	running := make([]*Manager, 0, len(s.managers))
	for _, m := range s.managers {
		running = append(running, m)
	}
	s.mu.Unlock()
	for _, m := range running {
		if p := m.wm.fence.Load(); p != nil {
			left = append(left, fmt.Sprintf("manager %s is still running fenced by point %s", m.Name, p))
		}
		if !slices.Contains(managers, m.Name) {
			left = append(left, fmt.Sprintf("manager %s, started during the run, is still running: stop it in an AfterCleanup", m.Name))
		}
	}
	goroutines := caseGoroutines()
	for _, c := range cases {
		ns := c.Namespace
		if s.planFor(ns, false) != nil {
			left = append(left, fmt.Sprintf("the perturbation plan of namespace %s is still armed", ns))
		}
		s.chmu.Lock()
		for _, ch := range s.changeTriggers {
			if ch.pl.ns == ns {
				left = append(left, fmt.Sprintf("point %s still waits for a change in namespace %s", ch.a.p, ns))
			}
		}
		s.chmu.Unlock()
		for _, m := range running {
			for _, kind := range m.holds.heldBy(ns) {
				left = append(left, fmt.Sprintf("manager %s's cache still holds back its %s watch for a point of namespace %s", m.Name, kind, ns))
			}
		}
		if s.gate.admitted(ns) {
			left = append(left, fmt.Sprintf("namespace %s is still admitted at the gate", ns))
		}
		if n := goroutines[ns]; n > 0 {
			left = append(left, fmt.Sprintf("%d goroutines the harness started for namespace %s are still running", n, ns))
		}
		for _, o := range c.settledLeftovers() {
			left = append(left, fmt.Sprintf("%s/%s is still in namespace %s", o.GetObjectKind().GroupVersionKind().Kind, o.GetName(), ns))
		}
	}
	if len(left) == 0 {
		return nil
	}
	return errors.New(strings.Join(left, "; "))
}

// freshManagers stops every running manager of names, makes the mutant of run of spec active (mutant.Begin,
// under make mutate; a manager that does not stop fails the run before, of spec before, whose mutant it
// ran) and starts a fresh instance of each from its ManagerOptions, in the order they first started, the one that serves webhooks first and synced before the
// others launch (their caches may need its conversions). The others' Register funcs run one after another,
// as at Boot, and then their caches sync and their workers start at once: each waits 100-300 ms on its
// informers, and seven in turn were most of a run's cost. It returns once their controllers run (a
// follower's need not). A handle to a manager follows it to the new instance, as after a restart point.
// Errors: a manager that does not stop within Options.StopTimeout or does not start again, all joined.
func (s *Suite) freshManagers(spec string, run int, before string, names []string) error {
	s.mu.Lock()
	var ms []*Manager
	for _, name := range s.order {
		if m := s.managers[name]; m != nil && slices.Contains(names, name) {
			ms = append(ms, m)
		}
	}
	s.mu.Unlock()
	deadline := time.Now().Add(s.stopTimeout)
	for _, m := range ms {
		m.stop()
	}
	for _, m := range ms {
		if err := m.stopInstance(deadline, s.stopTimeout); err != nil {
			err = fmt.Errorf("stopping manager %s for a fresh instance: %w", m.Name, err)
			prev := run - 1
			if before != spec {
				s.mu.Lock()
				prev = s.specRuns[before].n
				s.mu.Unlock()
			}
			mutant.Note(mutant.Marker{Spec: before, Run: prev, Kind: mutant.FailedAfter, Why: err.Error()})
			return err
		}
	}
	if err := mutant.Begin(spec, run); err != nil {
		return err
	}
	if i := slices.IndexFunc(ms, func(m *Manager) bool { return s.hooks.serves(m.Name) }); i > 0 {
		serving := ms[i]
		ms = append([]*Manager{serving}, slices.Delete(ms, i, i+1)...)
	}
	// ready waits until the fresh instance next of m has synced and its workers run.
	ready := func(m, next *Manager, ctx context.Context) error {
		if err := s.synced(ctx, next); err != nil {
			return fmt.Errorf("starting a fresh instance of manager %s: %w", m.Name, err)
		}
		if !m.restarted(next) || next.opts.LeaderElection {
			return nil
		}
		select {
		case <-next.wm.workersRunning():
			return nil
		case <-time.After(s.startTimeout):
			return fmt.Errorf("a fresh instance of manager %s started, but its controllers' workers did not start within %s", m.Name, s.startTimeout)
		}
	}
	errs := make([]error, len(ms))
	var wg sync.WaitGroup
	for i, m := range ms {
		next, ctx, err := s.launchManager(m.opts)
		if err != nil {
			errs[i] = fmt.Errorf("starting a fresh instance of manager %s: %w", m.Name, err)
			break
		}
		if i == 0 && s.hooks.serves(m.Name) {
			if errs[i] = ready(m, next, ctx); errs[i] != nil {
				break
			}
			continue
		}
		wg.Go(func() { errs[i] = ready(m, next, ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// caseLabel is the profiler label on the goroutines the harness starts for a case: its namespace.
const caseLabel = "ensemble.case"

// goCase runs f on a new goroutine labelled with the case namespace ns, which the isolation check counts. The
// goroutine is started inside pprof.Do so that it has the label from its creation on, not only once it is scheduled.
func goCase(ns string, f func()) {
	pprof.Do(context.Background(), pprof.Labels(caseLabel, ns), func(context.Context) { go f() })
}

// caseGoroutines counts the running goroutines goCase started, by namespace, from the goroutine profile.
func caseGoroutines() map[string]int {
	var b bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
	out := map[string]int{}
	// Each stack is a block: "N @ addresses", then "# labels: {...}" when it has labels.
	count := 0
	sc := bufio.NewScanner(&b)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	prefix := "# labels: "
	key := strconv.Quote(caseLabel) + ":"
	for sc.Scan() {
		line := sc.Text()
		if n, _, ok := strings.Cut(line, " @ "); ok {
			count, _ = strconv.Atoi(n)
			continue
		}
		labels, ok := strings.CutPrefix(line, prefix)
		if !ok {
			continue
		}
		if _, v, ok := strings.Cut(labels, key); ok {
			if ns, err := strconv.QuotedPrefix(v); err == nil {
				if uq, err := strconv.Unquote(ns); err == nil {
					out[uq] += count
				}
			}
		}
	}
	return out
}
