package mutate

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// batchRuns is how many mutants one test process of the schema runs (a run each, of each of its specs).
const batchRuns = 10

// maxLost is how many of a mutant's runs a signal from outside may end before the mutant is judged
// killed by them.
const maxLost = 3

// scheduler hands out the schema's batches and moves each mutant through the specs that cover it. A batch
// is up to batchRuns mutants, those with the same specs left together first, which one test process runs
// as flake attempts, each spec of their union once per mutant it covers (the others' runs skipped at
// once): the harness fails a run that passed on purpose and a run whose mutant failed earlier in the
// process at once, so every run goes on to the next and one boot serves every run of the batch (repeated while passing, every kill would end its spec's runs, and the runs after it would pay
// for a boot of their own: measured, 22 s for one run of the fastest multigres spec, 40 s for ten).
type scheduler struct {
	r  *runner
	ms []Mutant
	// left are each mutant's specs still to pass, fastest alone first; lost counts the runs of each that a
	// signal from outside ended.
	left map[int][]string
	lost map[int]int
	// setupRetried marks the mutants of a batch whose BeforeSuite failed before any spec ran, run again
	// once in another process; a second such failure kills the first run's mutant.
	setupRetried map[int]bool
	// waiting holds the mutants waiting for a batch, by their specs' key (specsKey); solo those that run
	// alone in a process.
	waiting map[string][]int
	solo    []int
	// single is set once the suite turns out to run a spec once however many runs are asked for: every
	// mutant then runs alone.
	single bool

	mu       sync.Mutex
	cond     *sync.Cond
	inflight int
	err      error
	done     int
	total    int
	// processes and runs count the test processes and the runs they made.
	processes, runs int
}

// specsKey is a set of specs as a map key.
func specsKey(specs []string) string { return strings.Join(specs, "\x00") }

// schemaRuns judges the schema mutants of todo with the compiled schema bin, r.jobs processes at once,
// printing a line as each is judged (done of total so far).
func (r *runner) schemaRuns(bin string, ms []Mutant, todo []int, done *int, total int) (processes, runs int, err error) {
	s := &scheduler{r: r, ms: ms, left: map[int][]string{}, lost: map[int]int{}, setupRetried: map[int]bool{}, waiting: map[string][]int{}, total: total}
	s.cond = sync.NewCond(&s.mu)
	s.done = *done
	for _, i := range todo {
		if ms[i].ID == 0 || ms[i].Status != NotRun {
			continue
		}
		specs := slices.Clone(ms[i].Specs)
		s.order(specs)
		s.left[i] = specs
		s.enqueue(i)
	}
	var wg sync.WaitGroup
	for range max(r.jobs, 1) {
		wg.Go(func() {
			for {
				b, ok := s.take()
				if !ok {
					return
				}
				res, err := r.run(bin, b, ms)
				s.finish(b, res, err)
			}
		})
	}
	wg.Wait()
	*done = s.done
	return s.processes, s.runs, s.err
}

// enqueue puts mutant i where it waits: alone, or with the mutants that have the same specs left. Called
// with s.mu held or before the workers start.
func (s *scheduler) enqueue(i int) {
	if s.ms[i].Solo || s.single {
		s.solo = append(s.solo, i)
		return
	}
	k := specsKey(s.left[i])
	s.waiting[k] = append(s.waiting[k], i)
}

// take hands out the next batch: a mutant alone, else up to size mutants from the waiting ones, the
// largest group with the same specs left first and then the next largest, so a process runs the union of
// their specs and skips the runs of each spec that does not cover its mutant (batch.skip). Mutants with
// different specs share a process, and its boot, instead of waiting for one of their own. It waits while
// batches in flight may queue more, and says false when nothing is left to run.
func (s *scheduler) take() (batch, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		if s.err != nil || s.r.ctx.Err() != nil {
			return batch{}, false
		}
		if len(s.solo) > 0 {
			i := s.solo[0]
			s.solo = s.solo[1:]
			s.inflight++
			return s.batchOf([]int{i}), true
		}
		waiting := 0
		for _, q := range s.waiting {
			waiting += len(q)
		}
		if waiting > 0 {
			n := s.size(waiting)
			var ids []int
			for len(ids) < n {
				k := longest(s.waiting)
				q := s.waiting[k]
				t := min(n-len(ids), len(q))
				ids = append(ids, q[:t]...)
				s.waiting[k] = q[t:]
			}
			s.inflight++
			return s.batchOf(ids), true
		}
		if s.inflight == 0 {
			return batch{}, false
		}
		s.cond.Wait()
	}
}

// batchOf is the batch of mutants ids: the union of their specs left, in s.order's order, each spec's
// runs of the mutants it does not cover skipped (called with s.mu held).
func (s *scheduler) batchOf(ids []int) batch {
	b := batch{mutants: slices.Clone(ids)}
	for _, i := range ids {
		for _, spec := range s.left[i] {
			if !slices.Contains(b.specs, spec) {
				b.specs = append(b.specs, spec)
			}
		}
	}
	s.order(b.specs)
	for _, spec := range b.specs {
		for k, i := range ids {
			if !slices.Contains(s.left[i], spec) {
				if b.skip == nil {
					b.skip = map[string][]int{}
				}
				b.skip[spec] = append(b.skip[spec], k+1)
			}
		}
	}
	return b
}

// order sorts specs fastest alone first, the order each mutant's specs are kept in. Ginkgo runs a
// process's specs in its own order whatever this one, so it only keeps batches and their output stable.
func (s *scheduler) order(specs []string) {
	slices.SortStableFunc(specs, func(a, b string) int {
		if c := cmp.Compare(s.r.alone[a], s.r.alone[b]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
}

// size is how many of waiting mutants the next batch takes: batchRuns at most, and a share of them when
// fewer are waiting than the idle processes could take (called with s.mu held). A process whose runs wait
// out a spec's timeout (a kill) keeps little busy, so idle processes are better running the other mutants
// at once than leaving them for later, though each pays for its boot.
func (s *scheduler) size(waiting int) int {
	idle := max(s.r.jobs-s.inflight, 1)
	return max(1, min(batchRuns, (waiting+idle-1)/idle))
}

// longest is the key of the longest non-empty queue of qs ("" when all are empty), the least key of equals.
func longest(qs map[string][]int) string {
	best := ""
	for k, q := range qs {
		if len(q) > 0 && (best == "" || len(q) > len(qs[best]) || (len(q) == len(qs[best]) && k < best)) {
			best = k
		}
	}
	return best
}

// finish applies a batch's results: a mutant with a killed (or timed out) run is judged killed, one that
// passed its last spec survived, and the others wait again with the specs they passed struck off. A batch
// whose BeforeSuite failed before any spec ran waits again whole, once.
func (s *scheduler) finish(b batch, res batchResult, err error) {
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
	s.single = s.single || res.single
	if res.setup != "" && !s.setupRetried[b.mutants[0]] {
		// As make explore does with a batch whose suite set-up failed: the mutants run again in another
		// process, once, and the first run's mutant is killed only if that fails too.
		for _, i := range b.mutants {
			s.setupRetried[i] = true
			s.enqueue(i)
		}
		fmt.Fprintf(s.r.out, "a test process failed its suite set-up before its first run (%s); its %d mutants go to another process\n", res.setup, len(b.mutants))
		return
	}
	for k, i := range b.mutants {
		m := &s.ms[i]
		if res.lost != nil && res.lost.run == k+1 {
			// A mutant whose runs outside signals keep ending (the OOM killer's, say) is judged by them.
			if s.lost[i]++; s.lost[i] == maxLost {
				m.Status, m.Detail = Killed, fmt.Sprintf("[LOST] %s: its test process was ended by a signal from outside %d times, in this run", res.lost.spec, maxLost)
				s.report(i)
				continue
			}
		}
		var failed *outcome
		for _, spec := range b.specs {
			c := cell{spec: spec, run: k + 1}
			m.Run += res.took[c]
			o, ok := res.cells[c]
			if !ok {
				continue
			}
			s.runs++
			if !slices.Contains(s.left[i], spec) {
				continue
			}
			m.Ran++
			switch o.verdict {
			case passed:
				s.left[i] = slices.DeleteFunc(s.left[i], func(x string) bool { return x == spec })
			default:
				if failed == nil {
					failed = &o
				}
			}
		}
		switch {
		case failed != nil:
			m.Status, m.Detail = failed.verdict, failed.detail
			s.report(i)
		case len(s.left[i]) == 0:
			m.Status = Survived
			s.report(i)
		default:
			m.Solo = m.Solo || res.solo
			s.enqueue(i)
		}
	}
}

// report prints the line of a judged mutant (called with s.mu held).
func (s *scheduler) report(i int) {
	s.done++
	fmt.Fprintln(s.r.out, progress(s.done, s.total, s.ms[i]))
}
