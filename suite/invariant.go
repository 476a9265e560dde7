package suite

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// violation is the first time an invariant did not hold. It unwraps to what the invariant returned.
type violation struct {
	// Name is the invariant's name; Err what it returned; Time when it was seen.
	Name string
	Err  error
	Time time.Time
	// Around are the namespace's changes in the second before and the 200 ms after the violation.
	Around []Change
}

// Unwrap returns what the invariant returned.
func (v *violation) Unwrap() error { return v.Err }

// Error renders the violation with the timeline around it.
func (v *violation) Error() string {
	return fmt.Sprintf("invariant %q violated at %s: %v\n  changes around it:\n%s", v.Name, v.Time.Format("15:04:05.000"), v.Err, indent(lastLines(v.Around, 40, Change.String)))
}

type invariant struct {
	taken bool
	name  string
	check func(ctx context.Context, r client.Reader, namespace string) error
	stop  context.CancelFunc
	done  chan struct{}
	mu    sync.Mutex
	first *violation
}

// Invariant checks fn at once, then after each change, write or pass's end the suite records, until the
// case ends, and keeps the first violation. What arrives while fn runs is coalesced into one more check, so a
// state that came and went during a check goes unseen. fn reads the namespace's live objects through r (the
// event stream's cache) and returns nil while the invariant holds, else an error describing the violation.
// RequireInvariants (and the case's cleanup) fail the test with the first violation and the changes around
// it. Checks run on a goroutine of their own: fn must be safe to call concurrently with the spec and must
// not call the test's TB.
func (c *Case) Invariant(name string, fn func(ctx context.Context, r client.Reader, namespace string) error) {
	ctx, cancel := context.WithCancel(context.Background())
	inv := &invariant{name: name, check: fn, stop: cancel, done: make(chan struct{})}
	c.mu.Lock()
	c.invariants = append(c.invariants, inv)
	c.mu.Unlock()
	goCase(c.Namespace, func() {
		defer close(inv.done)
		for {
			wake := c.s.notify.wait()
			if err := fn(ctx, c.s.reader, c.Namespace); err != nil && ctx.Err() == nil {
				v := &violation{Name: name, Err: err, Time: time.Now()}
				inv.mu.Lock()
				inv.first = v
				inv.mu.Unlock()
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-wake:
			}
		}
	})
}

// RequireInvariants fails the test (Fatalf) with the first violation of any invariant of the case, with the
// changes around it; it does nothing while every invariant holds.
func (c *Case) RequireInvariants() {
	c.t.Helper()
	if msg := c.invariantErrors(); msg != "" {
		c.fatalf("%s", msg)
	}
}

// TakeViolation returns the first violation of the named invariant (an error that says when, with the
// changes around it, and unwraps to what the invariant returned) and takes it: the case's cleanup no longer fails the test with it. For a KnownDefect pin whose
// evidence is the invariant's violation: `c.KnownDefect(ref, func() error { return c.TakeViolation(name) })`
// passes while the defect breaks the invariant and fails once it holds. It returns nil while the invariant
// holds, and a harness error (see Harness) for a name no Invariant registered.
func (c *Case) TakeViolation(name string) error {
	c.mu.Lock()
	var inv *invariant
	for _, i := range c.invariants {
		if i.name == name {
			inv = i
		}
	}
	c.mu.Unlock()
	if inv == nil {
		return Harness(fmt.Errorf("no invariant named %q in this case", name))
	}
	inv.mu.Lock()
	v := inv.first
	if v != nil {
		inv.taken = true
	}
	inv.mu.Unlock()
	if v == nil {
		return nil
	}
	c.fillAround(v)
	return v
}

// fillAround records the case's changes in the second before and the 200 ms after the violation.
func (c *Case) fillAround(v *violation) {
	if v.Around != nil {
		return
	}
	for _, ch := range c.s.stream.changes(c.Namespace, ChangeFilter{Since: v.Time.Add(-time.Second)}) {
		if ch.Time.Before(v.Time.Add(200 * time.Millisecond)) {
			v.Around = append(v.Around, ch)
		}
	}
}

// invariantErrors renders each violation not taken, with the changes around it, and marks it on the case's
// timeline at the time it was seen; empty while all hold.
func (c *Case) invariantErrors() string {
	c.mu.Lock()
	invs := append([]*invariant(nil), c.invariants...)
	c.mu.Unlock()
	var msgs []string
	for _, inv := range invs {
		inv.mu.Lock()
		v, taken := inv.first, inv.taken
		inv.mu.Unlock()
		if v != nil && !taken {
			c.fillAround(v)
			c.markAt(v.Time, fmt.Sprintf("invariant %q violated: %v", v.Name, v.Err))
			msgs = append(msgs, v.Error())
		}
	}
	return strings.Join(msgs, "\n")
}

// stopInvariants stops every invariant's goroutine and waits for it.
func (c *Case) stopInvariants() {
	c.mu.Lock()
	invs := c.invariants
	c.mu.Unlock()
	for _, inv := range invs {
		inv.stop()
		<-inv.done
	}
}
