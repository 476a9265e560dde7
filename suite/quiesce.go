package suite

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// errInterrupted is what a Case's checks fail with once a SIGINT or SIGTERM stopped the control plane.
var errInterrupted = errors.New("suite: the run was interrupted (SIGINT or SIGTERM) and the control plane is gone")

// errNotQuiet is wrapped by the error RequireQuiescent fails with when the namespace was not quiet in time.
var errNotQuiet = errors.New("not quiescent")

// errLastPassFailed is wrapped by the error RequireQuiescent fails with when the namespace stayed quiet until the
// timeout while the last reconcile pass of some controller key in it had returned an error (controller-runtime
// retries such a key, so a quiet namespace with one is waiting for that retry), or at once when every such error
// was terminal (reconcile.TerminalError, never retried): a controller that gave up is not converged.
var errLastPassFailed = errors.New("quiet, but a last reconcile pass ended in an error")

// QuietOption changes what RequireQuiescent counts as activity.
type QuietOption func(*quietConfig)

type quietConfig struct {
	stateOnly bool
	// firstQuiet ends the wait at the first quiet window even when a last pass ended in an error that will be
	// retried (a perturbation's release, which only needs the namespace quiet for a moment).
	firstQuiet bool
	// hotLoops ends the wait at the first hot loop in the namespace (a case that did not opt out of HotLoop).
	hotLoops bool
	// requeues makes the wait also cover every requeue a controller was owed when the namespace last changed
	// (the convergence oracle's, whose end state the differential oracle compares).
	requeues bool
}

// StateOnly makes RequireQuiescent count only changes of watched objects, not attempted writes: "stable"
// rather than "quiet". Use it where a controller legitimately keeps re-applying an unchanged status while
// it waits for something outside Kubernetes (requeue compression makes such passes frequent).
func StateOnly() QuietOption { return func(c *quietConfig) { c.stateOnly = true } }

// waitQuiescent waits until namespace ns has been quiet for window: no watched object changed, no write to
// it was attempted (see StateOnly), and no reconcile pass for it is running. It then checks that the last
// pass of every controller key in ns did not end in an error. A last pass that ended in an error which is
// not terminal has a retry to come (the controller's rate limiter, whose delays double up to minutes, and
// which ensemble does not shorten), so the wait goes on for that retry until timeout; it judges the errors
// at once only when all are terminal.
//
// It returns how long the call took (about zero when ns had already been quiet for window). Errors: ctx
// done; errNotQuiet after timeout, with the busiest objects, their field transitions and the writers
// since the call; errLastPassFailed naming the failed passes.
func (s *Suite) waitQuiescent(ctx context.Context, ns string, since time.Time, window, timeout time.Duration, opts ...QuietOption) (time.Duration, error) {
	if window <= 0 || timeout < window {
		return 0, fmt.Errorf("suite: quiescence window %s and timeout %s: the window must be positive and the timeout at least the window", window, timeout)
	}
	var cfg quietConfig
	for _, o := range opts {
		o(&cfg)
	}
	start := time.Now()
	deadline := start.Add(timeout)
	for {
		if err := s.broken(); err != nil {
			return time.Since(start), err
		}
		wake := s.notify.wait()
		// Quiet time counts from the case's start at the earliest: a namespace nothing happened in yet has
		// not been quiet for any window.
		last := s.stream.lastChange(ns)
		if last.Before(since) {
			last = since
		}
		if !cfg.stateOnly {
			if w := s.rec.lastWrite(ns); w.After(last) {
				last = w
			}
		}
		if cfg.hotLoops {
			if h := s.rec.hotLoopsIn(ns, since); len(h) > 0 {
				return time.Since(start), fmt.Errorf("namespace %s: %w: %s\n%s", ns, errNotQuiet, h[0], s.activityReport(ns, h[0].First))
			}
		}
		running := s.rec.running(ns)
		now := time.Now()
		retryDue := false
		var owedDue time.Time // when an owed requeue falls due (zero: none owed)
		if running == 0 && now.Sub(last) >= window {
			took := now.Sub(start)
			failed := s.rec.lastPassErrors(ns)
			if len(failed) == 0 {
				if !cfg.requeues {
					return took, nil
				}
				// A controller whose latest pass began before the last change and asked to be requeued has not
				// looked at the state it will act on: wait for that pass (until the deadline at most, when the
				// state, quiet all along, is what there is).
				due, owed := s.rec.owedRequeue(ns, last)
				if !owed || !now.Before(deadline) {
					return took, nil
				}
				retryDue, owedDue = true, due
			} else if retryDue = !cfg.firstQuiet && !allTerminal(failed) && now.Before(deadline); !retryDue {
				var lines []string
				for _, p := range failed {
					lines = append(lines, p.line())
				}
				return took, fmt.Errorf("namespace %s: %w:\n%s", ns, errLastPassFailed, indent(lines))
			}
		}
		if now.After(deadline) {
			return now.Sub(start), fmt.Errorf("namespace %s: %w within %s (window %s):\n%s", ns, errNotQuiet, timeout, window, s.activityReport(ns, start))
		}
		next := last.Add(window)
		if running > 0 || retryDue || next.After(deadline) {
			next = deadline
		}
		if owedDue.After(now) && owedDue.Before(next) {
			next = owedDue
		}
		timer := time.NewTimer(time.Until(next) + time.Millisecond)
		select {
		case <-ctx.Done():
			timer.Stop()
			return time.Since(start), ctx.Err()
		case <-wake:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// allTerminal reports whether every pass in failed returned a reconcile.TerminalError, which controller-runtime
// does not retry.
func allTerminal(failed []Pass) bool {
	for _, p := range failed {
		if !errors.Is(p.Err, reconcile.TerminalError(nil)) {
			return false
		}
	}
	return true
}

// activityReport names what kept namespace ns busy since t: the busiest objects, the fields that changed
// most (with their latest transition) and the writers.
func (s *Suite) activityReport(ns string, since time.Time) string {
	objects := map[string]int{}
	fields := map[string]int{}
	lastTransition := map[string]string{}
	for _, c := range s.stream.changes(ns, ChangeFilter{Since: since}) {
		obj := c.Kind + "/" + c.Name
		objects[obj]++
		for _, f := range c.Fields {
			k := obj + " " + f.Path
			fields[k]++
			lastTransition[k] = f.Old + " -> " + f.New
		}
	}
	var fl []string
	for _, line := range topN(fields, 8) {
		k := line[:strings.LastIndex(line, " (")]
		fl = append(fl, line+": last "+lastTransition[k])
	}
	return "  busiest objects (changes):\n" + indent(topN(objects, 5)) +
		"\n  field transitions:\n" + indent(fl) +
		"\n  writers (writes):\n" + indent(topN(s.rec.writers(ns, since), 8))
}
