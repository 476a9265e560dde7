package explore

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/onsi/ginkgo/v2/types"

	"github.com/ensembletest/ensemble/internal/ginkgoreport"
	"github.com/ensembletest/ensemble/internal/textout"
	"github.com/ensembletest/ensemble/suite/perturb"
)

// defaultBatch is -batch's default: how many runs of points of one spec one test process makes. Ten
// runs make the boot (about 6 s) a small share of a batch of short specs, and a batch that ends early at a
// failing point costs little.
const defaultBatch = 10

// item is one run of one point: its row in x.Rows, the point, and which of -repeat's runs it is (from 0);
// retried says a process already failed its suite set-up before the run began.
type item struct {
	row     int
	sp      SpecPoint
	k       int
	retried bool
}

// batcher hands out batches of items, each of one spec, and assembles the rows from their outcomes.
type batcher struct {
	c    config
	p    plan
	x    *Exploration
	todo []SpecPoint
	smp  *sampler
	out  io.Writer
	// desc is the suite's description, for the rerun commands' focus.
	desc string

	mu sync.Mutex
	// pending are items a process did not reach (a run before them failed), handed out first.
	pending []item
	// queued are points drawn while a batch of another spec filled, in the order drawn; the next batches take
	// them first, a spec at a time.
	queued []SpecPoint
	// points are each row's point; outs, took and dirs are each row's outcomes, run times and run
	// directories by repeat; left counts the runs a row still needs.
	points []SpecPoint
	outs   [][]Outcome
	took   [][]Duration
	dirs   [][]string
	left   []int
	// drawn counts the points handed out: the sampler's (this shard's and the others'), or todo's;
	// started is when the points began, began when the command did (for Row.Elapsed).
	drawn          int
	started, began time.Time
	// matched says which of -until's regexps a failing row matched.
	matched []bool
	// stop says no new point is taken: every -until regexp matched, or the suite cannot run a batch (setupErr).
	stop     bool
	setupErr error
	done     int
	runTimes []time.Duration
}

// runPoints runs phase 3: the points, in batches of -batch points of one spec per test process, -j processes
// at once, -repeat runs each, into x.Rows; began is when the command began. It returns every run's time and
// when the points began. Errors: a suite that runs a spec once when a batch asks for more (it does not hand
// suite.Runs() to Ginkgo).
func runPoints(ctx context.Context, c config, r *runner, p plan, x *Exploration, todo []SpecPoint, smp *sampler, desc string, began time.Time, out io.Writer) ([]time.Duration, time.Time, error) {
	b := &batcher{c: c, p: p, x: x, todo: bySpec(todo), smp: smp, out: out, desc: desc, started: time.Now(), began: began,
		matched: make([]bool, len(p.until))}
	baseline := strings.Join(x.Baselines, string(os.PathListSeparator))
	workers(c.jobs, func() ([]item, int, bool) { return b.next(ctx) }, func(batch []item, _ int) {
		b.run(ctx, r, batch, desc, baseline)
	})
	b.finish()
	return b.runTimes, b.started, b.setupErr
}

// bySpec orders todo's points spec by spec (the specs in the order of their first point, each spec's points
// in their order), so a batch fills with -batch points of its spec: the sampler spreads a budget over the
// specs, and in its order every batch of a sweep over many specs held one point and paid a whole boot. The
// rows keep each point's Index, and finish puts them back in that order.
func bySpec(todo []SpecPoint) []SpecPoint {
	var specs []string
	points := map[string][]SpecPoint{}
	for _, sp := range todo {
		if _, ok := points[sp.Spec]; !ok {
			specs = append(specs, sp.Spec)
		}
		points[sp.Spec] = append(points[sp.Spec], sp)
	}
	out := make([]SpecPoint, 0, len(todo))
	for _, s := range specs {
		out = append(out, points[s]...)
	}
	return out
}

// next hands out the next batch of at most -batch runs: the items no process reached first, then new points
// of the same spec while the budget lasts (each -repeat times). ok is false when there is nothing left to run.
func (b *batcher) next(ctx context.Context) (batch []item, _ int, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if ctx.Err() != nil || b.stop {
		return nil, 0, false
	}
	spec := ""
	rest := b.pending[:0:0]
	for _, it := range b.pending {
		if (spec == "" || it.sp.Spec == spec) && len(batch) < b.c.batch {
			spec = it.sp.Spec
			batch = append(batch, it)
			continue
		}
		rest = append(rest, it)
	}
	b.pending = rest
	if spec == "" && len(b.queued) > 0 && !b.timeUp() {
		spec = b.queued[0].Spec
	}
	for i := 0; i < len(b.queued) && len(batch) < b.c.batch && !b.timeUp(); {
		if sp := b.queued[i]; sp.Spec == spec {
			b.queued = slices.Delete(b.queued, i, i+1)
			batch = b.add(batch, sp)
			continue
		}
		i++
	}
	for !b.stop && len(batch) < b.c.batch {
		sp, ok := b.draw()
		if !ok {
			break
		}
		if spec != "" && sp.Spec != spec {
			// With a point budget todo is in spec order, so the next spec's first point ends the batch. The
			// sampler spreads a time budget over the specs, so its points are drawn ahead (up to a batch for
			// every spec) while this batch fills.
			b.queued = append(b.queued, sp)
			if b.smp == nil || len(b.queued) >= b.c.batch*b.smp.specs() {
				break
			}
			continue
		}
		spec = sp.Spec
		batch = b.add(batch, sp)
	}
	return batch, 0, len(batch) > 0
}

// add makes sp a row, with -repeat items: those that fit in batch join it, the rest wait in pending. It
// returns the batch. Called with b.mu held.
func (b *batcher) add(batch []item, sp SpecPoint) []item {
	b.x.Rows = append(b.x.Rows, Row{})
	b.points = append(b.points, sp)
	b.outs = append(b.outs, make([]Outcome, b.c.repeat))
	b.took = append(b.took, make([]Duration, b.c.repeat))
	b.dirs = append(b.dirs, make([]string, b.c.repeat))
	b.left = append(b.left, b.c.repeat)
	for k := range b.c.repeat {
		it := item{row: len(b.x.Rows) - 1, sp: sp, k: k}
		if len(batch) < b.c.batch {
			batch = append(batch, it)
		} else {
			b.pending = append(b.pending, it)
		}
	}
	return batch
}

// timeUp says a time budget is spent: no new point starts once one has (the first always runs).
func (b *batcher) timeUp() bool {
	return b.smp != nil && len(b.x.Rows) > 0 && time.Since(b.started) >= b.p.budget.Time
}

// draw takes the next new point: todo's in turn, or with a time budget the sampler's while the budget
// lasts, this shard's only. Called with b.mu held.
func (b *batcher) draw() (SpecPoint, bool) {
	if b.smp == nil {
		// Counted apart from the rows: a point drawn for the next spec waits in queued, not in a row, and
		// a batch that ends early puts its rest in pending and draws again before the queued point has a
		// row. Counted by rows, that draw handed the queued point out again and a later draw skipped one.
		if b.drawn < len(b.todo) {
			b.drawn++
			return b.todo[b.drawn-1], true
		}
		return SpecPoint{}, false
	}
	if b.timeUp() {
		return SpecPoint{}, false
	}
	for {
		sp, ok := b.smp.next()
		if !ok {
			return sp, false
		}
		sp.Index, b.drawn = b.drawn, b.drawn+1
		if sp.Index%b.p.of == b.p.shard-1 {
			return sp, true
		}
	}
}

// run runs one batch in one test process, a point a run (ENSEMBLE_PERTURB's runs), and judges each run it
// reached; the items after a failing run go back to pending.
func (b *batcher) run(ctx context.Context, r *runner, batch []item, desc, baseline string) {
	spec := batch[0].sp.Spec
	var runs []string
	for _, it := range batch {
		runs = append(runs, it.sp.Point.String())
	}
	dir := filepath.Join(r.dir, "points", processDir(batch[0]))
	start := time.Now()
	res := r.run(ctx, dir, specFocus(desc, spec), strings.Join(runs, perturb.RunSeparator), baseline)
	end := time.Now()
	// A suite set-up that failed (a kube-apiserver that did not come up on a busy machine) says nothing of
	// the points: their runs go to another process once, and are judged "error" only if that fails too.
	if why := res.setupFailure(spec); why != "" && !batch[0].retried {
		b.mu.Lock()
		for _, it := range batch {
			it.retried = true
			b.pending = append(b.pending, it)
		}
		b.mu.Unlock()
		fmt.Fprintf(b.out, "a test process failed its suite set-up before its spec ran (%s); its %d runs go to another process\n", why, len(batch))
		return
	}
	records, recErr := perturb.ReadRecords(res.records)
	byRun := map[int][]perturb.Record{}
	for _, rec := range records {
		byRun[rec.Run] = append(byRun[rec.Run], rec)
	}
	// reached is the run the process ended in: the spec's last attempt in its report, else (no report) the
	// run after the last one that wrote a record.
	reached := 0
	for run := range byRun {
		reached = max(reached, run)
	}
	if res.reportErr == nil {
		if sr, ok := ginkgoreport.It(res.Reports, spec); ok {
			reached = sr.NumAttempts
			if len(batch) > 1 && sr.MaxMustPassRepeatedly != len(batch) && sr.State.Is(types.SpecStatePassed) {
				b.mu.Lock()
				b.stop = true
				b.setupErr = fmt.Errorf("%s ran %q once when %d runs were asked (ENSEMBLE_PERTURB): hand suite.Runs() to Ginkgo's MustPassRepeatedly in the suite's RunSpecs (see suite.Runs), or pass -batch 1 (make's BATCH=1)", cleanSuite(r.suite), spec, len(batch))
				b.pending = append(b.pending, batch...)
				b.mu.Unlock()
				return
			}
		}
	} else if reached < len(batch) {
		reached++
	}
	reached = max(1, min(reached, len(batch)))
	prev := start
	b.mu.Lock()
	defer b.mu.Unlock()
	for j, it := range batch {
		run := j + 1
		if run > reached {
			b.pending = append(b.pending, batch[j:]...)
			break
		}
		var o Outcome
		switch {
		case recErr != nil:
			o = Outcome{Verdict: Error, Failure: recErr.Error(), Difference: recErr.Error()}
		case run < reached:
			// An earlier run passed (Ginkgo repeats a spec only while it passes): its record judges it.
			o = judge(spec, byRun[run], nil, nil)
		default:
			o = res.judgeRun(spec, byRun[run])
		}
		ended := end
		if recs := byRun[run]; run < reached && len(recs) > 0 && recs[len(recs)-1].Ended.After(prev) {
			ended = recs[len(recs)-1].Ended
		} else if run < reached {
			ended = prev // no time recorded: the process's time goes to its last run
		}
		d := ended.Sub(prev)
		prev = ended
		b.outs[it.row][it.k], b.took[it.row][it.k], b.dirs[it.row][it.k] = o, Duration(d), dir
		b.runTimes = append(b.runTimes, d)
		if b.left[it.row]--; b.left[it.row] == 0 {
			b.finishRow(it.row)
		}
	}
}

// finishRow makes row i from its runs and prints its line (called with b.mu held).
func (b *batcher) finishRow(i int) {
	sp := b.points[i]
	row := combine(sp, b.outs[i])
	row.Took, row.Dirs, row.Dir, row.Elapsed = b.took[i], b.dirs[i], b.dirs[i][shown(b.outs[i])], Duration(time.Since(b.began))
	row.Command = rerun(b.c.suite, b.desc, sp.Spec, row.Point, b.c.viaMake)
	b.x.Rows[i] = row
	for k, re := range b.p.until {
		b.matched[k] = b.matched[k] || matches(re, row)
	}
	if len(b.matched) > 0 && !slices.Contains(b.matched, false) {
		b.stop = true
	}
	b.done++
	fmt.Fprintf(b.out, "[%d] %s on %q: %s in %s\n", b.done, row.Point, textout.Cut(sp.Spec, 60), verdictCell(row),
		time.Duration(row.Took[len(row.Took)-1]).Round(100*time.Millisecond))
}

// finish leaves out the rows none of whose runs ran (-until's regexps all matched, an interrupt, a suite that cannot
// batch), as if never taken, and gives the rows short of some runs the verdict error for those.
func (b *batcher) finish() {
	b.mu.Lock()
	defer b.mu.Unlock()
	why := "interrupted before it ran"
	if b.setupErr != nil {
		why = b.setupErr.Error()
	}
	var rows []Row
	for i, n := range b.left {
		if n == b.c.repeat {
			continue
		}
		if n == 0 {
			rows = append(rows, b.x.Rows[i])
			continue
		}
		for k := range b.outs[i] {
			if b.outs[i][k].Verdict == "" {
				b.outs[i][k] = Outcome{Verdict: Error, Failure: why, Difference: why}
			}
		}
		b.left[i] = 0
		b.finishRow(i)
		rows = append(rows, b.x.Rows[i])
	}
	slices.SortStableFunc(rows, func(a, b Row) int { return a.Index - b.Index })
	b.x.Rows = rows
}
