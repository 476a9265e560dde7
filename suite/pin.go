package suite

import (
	"errors"
	"fmt"
	"strings"
)

// PinCatalog is the defect catalog KnownDefect checks a reference against (ensemble's own is in pins/).
type PinCatalog interface {
	// Lookup returns the catalog entry's title, and false for an unknown reference.
	Lookup(ref string) (title string, ok bool)
}

// ErrHarness marks an error of the harness inside a pin's check (a setup that timed out, an API call that
// failed): wrap it with Harness. KnownDefect fails the spec on it instead of counting it as the defect.
var ErrHarness = errors.New("harness error")

// Harness wraps err as a harness error for a KnownDefect check; nil stays nil.
func Harness(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrHarness, err)
}

// Reporter is implemented by Ginkgo's GinkgoT(): KnownDefect adds its verdict as a report entry that is
// shown without -v. For a plain *testing.T the verdict goes to t.Logf.
type Reporter interface {
	AddReportEntryVisibilityAlways(name string, args ...any)
}

// KnownDefect pins a catalogued defect that is still live. check must return an error while the defect is
// present, describing what it observed; KnownDefect then passes and reports "<ref> still present: <error>".
// When check returns nil the defect is gone: the spec fails with "<ref> appears fixed: replace this pin with
// a positive assertion". An empty ref, a ref the catalog does not know, or a check error wrapping
// ErrHarness fail the spec; a harness error never keeps a pin green.
func KnownDefect(t TB, catalog PinCatalog, ref string, check func() error) {
	t.Helper()
	ref = strings.TrimSpace(ref)
	if ref == "" {
		t.Fatalf("suite: KnownDefect with an empty reference: name the catalog ID of the defect this pin holds (see pins/)")
		return
	}
	title := ""
	if catalog != nil {
		var ok bool
		if title, ok = catalog.Lookup(ref); !ok {
			t.Fatalf("suite: KnownDefect(%q): no such defect in the catalog: add it to pins/ or fix the reference", ref)
			return
		}
	}
	err := check()
	switch {
	case err == nil:
		t.Fatalf("%s appears fixed: replace this pin with a positive assertion (%s)", ref, title)
	case errors.Is(err, ErrHarness):
		t.Fatalf("suite: KnownDefect(%s): the check failed for a reason that is not the defect: %v", ref, err)
	default:
		msg := fmt.Sprintf("%s still present: %v", ref, err)
		if r, ok := t.(Reporter); ok {
			r.AddReportEntryVisibilityAlways("KnownDefect "+ref, msg)
		}
		t.Logf("%s", msg)
	}
}

// KnownDefect pins a catalogued defect in the case, against the suite's Options.Pins (see the package
// function KnownDefect for the verdicts).
func (c *Case) KnownDefect(ref string, check func() error) {
	c.t.Helper()
	KnownDefect(c.t, c.s.opts.Pins, ref, check)
}

// ProbeTB is a TB that records verdicts instead of failing: for testing a pin's check itself (does it return
// nil once the defect is fixed?) without failing the surrounding spec. Fatalf and Errorf mark it failed and
// keep the message; Cleanup functions run on RunCleanups. Not safe for concurrent use.
type ProbeTB struct {
	// TestName is what Name returns.
	TestName string
	// Fatals and Errors hold the formatted Fatalf and Errorf messages; Logs the Logf ones; Reports the
	// report entries ("name: args").
	Fatals, Errors, Logs, Reports []string
	cleanups                      []func()
}

// Helper does nothing.
func (p *ProbeTB) Helper() {}

// Name returns TestName.
func (p *ProbeTB) Name() string { return p.TestName }

// Cleanup queues f for RunCleanups.
func (p *ProbeTB) Cleanup(f func()) { p.cleanups = append(p.cleanups, f) }

// Logf records a log line.
func (p *ProbeTB) Logf(format string, args ...any) {
	p.Logs = append(p.Logs, fmt.Sprintf(format, args...))
}

// Errorf records an error.
func (p *ProbeTB) Errorf(format string, args ...any) {
	p.Errors = append(p.Errors, fmt.Sprintf(format, args...))
}

// Fatalf records a fatal failure (it does not stop the calling goroutine).
func (p *ProbeTB) Fatalf(format string, args ...any) {
	p.Fatals = append(p.Fatals, fmt.Sprintf(format, args...))
}

// Failed reports whether Fatalf or Errorf was called.
func (p *ProbeTB) Failed() bool { return len(p.Fatals)+len(p.Errors) > 0 }

// AddReportEntryVisibilityAlways records a report entry.
func (p *ProbeTB) AddReportEntryVisibilityAlways(name string, args ...any) {
	p.Reports = append(p.Reports, name+": "+fmt.Sprint(args...))
}

// RunCleanups runs the queued cleanups, last first.
func (p *ProbeTB) RunCleanups() {
	for i := len(p.cleanups) - 1; i >= 0; i-- {
		p.cleanups[i]()
	}
	p.cleanups = nil
}
