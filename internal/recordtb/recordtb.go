// Package recordtb is a suite.TB that records the harness's verdicts instead of failing the test that runs
// it, for the tests of those verdicts: suite's own over a plain testing.T, and the scenarios' under Ginkgo.
// Only tests import it.
package recordtb

import (
	"context"
	"fmt"
	"sync"

	"github.com/onsi/ginkgo/v2/types"
)

// stopped is what a Ginkgo TB's Errorf and Fatalf panic with, as GinkgoT's panic with Ginkgo's failure.
type stopped struct{}

// TB records Errorf, Fatalf, Logf and report entries (AddReportEntryVisibilityAlways, what a Case reports to
// GinkgoT) and keeps its own cleanups, which RunCleanups runs. Its zero value is ready to use. Safe for use
// by several goroutines.
type TB struct {
	// Ctx is what Context returns; context.Background() when nil.
	Ctx context.Context
	// TestName is what Name returns (a Case names its namespace after it).
	TestName string
	// Ginkgo makes the TB fail the way GinkgoT does: Errorf and Fatalf panic once they recorded the message,
	// so no harness code after a failing verdict runs as if nothing happened (Run and RunCleanups recover
	// that panic), and Helper marks its caller as a helper in Ginkgo's code locations.
	Ginkgo bool
	// Log, when set, is given each Logf line too (GinkgoT().Logf under Ginkgo).
	Log func(format string, args ...any)

	mu                            sync.Mutex
	errors, fatals, logs, reports []string
	cleanups                      []func()
}

func (p *TB) Context() context.Context {
	if p.Ctx == nil {
		return context.Background()
	}
	return p.Ctx
}

func (p *TB) Helper() {
	if p.Ginkgo {
		types.MarkAsHelper(1)
	}
}

func (p *TB) Name() string { return p.TestName }

// Cleanup adds f to the TB's own cleanups (see RunCleanups).
func (p *TB) Cleanup(f func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cleanups = append(p.cleanups, f)
}

func (p *TB) Logf(format string, args ...any) {
	p.mu.Lock()
	p.logs = append(p.logs, fmt.Sprintf(format, args...))
	p.mu.Unlock()
	if p.Log != nil {
		p.Log(format, args...)
	}
}

func (p *TB) Errorf(format string, args ...any) { p.record(&p.errors, format, args...) }
func (p *TB) Fatalf(format string, args ...any) { p.record(&p.fatals, format, args...) }

// record appends the message to *to and, under Ginkgo, stops the caller as a failing GinkgoT does.
func (p *TB) record(to *[]string, format string, args ...any) {
	p.mu.Lock()
	*to = append(*to, fmt.Sprintf(format, args...))
	p.mu.Unlock()
	if p.Ginkgo {
		panic(stopped{})
	}
}

// Failed reports whether Errorf or Fatalf was called.
func (p *TB) Failed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.errors)+len(p.fatals) > 0
}

// AddReportEntryVisibilityAlways records a report entry "name: args".
func (p *TB) AddReportEntryVisibilityAlways(name string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reports = append(p.reports, name+": "+fmt.Sprint(args...))
}

// Run runs f, which ends early at a recorded failure of a Ginkgo TB; any other panic goes on.
func (p *TB) Run(f func()) {
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(stopped); !ok {
				panic(r)
			}
		}
	}()
	f()
}

// RunCleanups runs the registered cleanups, last first, each to its end or its recorded failure, and
// forgets them.
func (p *TB) RunCleanups() {
	p.mu.Lock()
	cleanups := p.cleanups
	p.cleanups = nil
	p.mu.Unlock()
	for i := len(cleanups) - 1; i >= 0; i-- {
		p.Run(cleanups[i])
	}
}

// Errors, Fatals, Logs and Reports return the recorded messages and report entries, in order.
func (p *TB) Errors() []string  { return p.copied(&p.errors) }
func (p *TB) Fatals() []string  { return p.copied(&p.fatals) }
func (p *TB) Logs() []string    { return p.copied(&p.logs) }
func (p *TB) Reports() []string { return p.copied(&p.reports) }

// copied copies one list under the TB's lock.
func (p *TB) copied(of *[]string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), *of...)
}
