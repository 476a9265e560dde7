package suite

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// InvariantFunc is a predicate over the live objects of a namespace, read through r (the event stream's
// cache). It returns nil while the invariant holds and an error describing the violation otherwise.
type InvariantFunc func(ctx context.Context, r client.Reader, namespace string) error

// Violation is the first time an invariant did not hold.
type Violation struct {
	// Name is the invariant's name; Err what it returned; Time when it was seen.
	Name string
	Err  error
	Time time.Time
	// Around are the namespace's changes in the second before and the 200 ms after the violation.
	Around []Change
}

// Error renders the violation with the timeline around it.
func (v *Violation) Error() string {
	return fmt.Sprintf("invariant %q violated at %s: %v\n  changes around it:\n%s", v.Name, v.Time.Format("15:04:05.000"), v.Err, indent(lastLines(v.Around, 40)))
}

type invariant struct {
	taken bool
	name  string
	check InvariantFunc
	stop  context.CancelFunc
	done  chan struct{}
	mu    sync.Mutex
	first *Violation
}

// Invariant checks fn after every change the event stream sees in the case's namespace, from now until the
// case ends, and keeps the first violation. RequireInvariants (and the case's cleanup) fail the test with it
// and the timeline around it. Checks run on a goroutine of their own: fn must be safe to call concurrently
// with the spec and must not call the test's TB.
func (c *Case) Invariant(name string, fn InvariantFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	inv := &invariant{name: name, check: fn, stop: cancel, done: make(chan struct{})}
	c.mu.Lock()
	c.invariants = append(c.invariants, inv)
	c.mu.Unlock()
	go func() {
		defer close(inv.done)
		for {
			wake := c.s.notify.wait()
			if err := fn(ctx, c.s.reader, c.Namespace); err != nil && ctx.Err() == nil {
				v := &Violation{Name: name, Err: err, Time: time.Now()}
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
	}()
}

// RequireInvariants fails the test (Fatalf) with the first violation of any invariant of the case, with the
// changes around it; it does nothing while every invariant holds.
func (c *Case) RequireInvariants() {
	c.t.Helper()
	if err := c.InvariantsHold(); err != nil {
		c.t.Fatalf("%v", err)
	}
}

// TakeViolation returns the first violation of the named invariant (a *Violation, with the changes around
// it) and takes it: the case's cleanup no longer fails the test with it. For a KnownDefect pin whose
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
func (c *Case) fillAround(v *Violation) {
	if v.Around != nil {
		return
	}
	for _, ch := range c.s.stream.Changes(ChangeFilter{Namespace: c.Namespace, Since: v.Time.Add(-time.Second)}) {
		if ch.Time.Before(v.Time.Add(200 * time.Millisecond)) {
			v.Around = append(v.Around, ch)
		}
	}
}

// InvariantsHold returns nil while every invariant of the case holds (or its violation was taken with
// TakeViolation), else an error naming each violated invariant with its first violation and the changes
// around it.
func (c *Case) InvariantsHold() error {
	if msg := c.invariantErrors(); msg != "" {
		return fmt.Errorf("%s", msg)
	}
	return nil
}

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
