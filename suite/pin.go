package suite

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// PinCatalog is the defect catalog KnownDefect checks a reference against (ensemble's own is in pins/).
type PinCatalog interface {
	// Lookup returns the catalog entry's title, and false for an unknown reference.
	Lookup(ref string) (title string, ok bool)
}

// errHarness marks an error of the harness inside a pin's check; Harness wraps an error with it.
var errHarness = errors.New("harness error")

// Harness marks err as an error of the harness inside a KnownDefect check (a setup that timed out, an API
// call that failed): KnownDefect then fails the spec instead of counting it as the defect. nil stays nil.
func Harness(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", errHarness, err)
}

// reporter is implemented by Ginkgo's GinkgoT(): KnownDefect adds its verdict as a report entry that is
// shown without -v. For a plain *testing.T the verdict goes to t.Logf.
type reporter interface {
	AddReportEntryVisibilityAlways(name string, args ...any)
}

// knownDefect decides a pin against catalog, reporting to t (see Case.KnownDefect): a pure decision over
// the check's result, table-tested with a test double for t.
//
// The report line is short: the first line of the check's error, at most pinLineMax characters. When the
// error says more, evidence (may be nil) keeps the whole of it and returns where, and the line names that.
// failed (may be nil) is told every verdict that fails the spec, before t is.
func knownDefect(t TB, catalog PinCatalog, ref string, check func() error, evidence func(ref, full string) string, failed func(msg string)) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		msg := fmt.Sprintf(format, args...)
		if failed != nil {
			failed(msg)
		}
		t.Fatalf("%s", msg)
	}
	ref = strings.TrimSpace(ref)
	if ref == "" {
		fail("suite: KnownDefect with an empty reference: name the catalog ID of the defect this pin holds (see pins/)")
		return
	}
	if catalog == nil {
		fail("suite: KnownDefect(%q): Options.Pins is not set: give Boot the defect catalog this pin refers to", ref)
		return
	}
	title, ok := catalog.Lookup(ref)
	if !ok {
		fail("suite: KnownDefect(%q): no such defect in the catalog: add it to the catalog or fix the reference", ref)
		return
	}
	err := check()
	switch {
	case err == nil:
		fail("%s appears fixed: replace this pin with a positive assertion (%s)", ref, title)
	case errors.Is(err, errHarness):
		fail("suite: KnownDefect(%s): the check failed for a reason that is not the defect: %v", ref, err)
	default:
		full := err.Error()
		short, _, _ := strings.Cut(full, "\n")
		if len(short) > pinLineMax {
			short = short[:pinLineMax] + "..."
		}
		if short != full && evidence != nil {
			if where := evidence(ref, full); where != "" {
				short += " (evidence: " + where + ")"
			}
		}
		msg := fmt.Sprintf("%s still present: %s", ref, short)
		if r, ok := t.(reporter); ok {
			r.AddReportEntryVisibilityAlways("KnownDefect "+ref, msg)
		} else {
			t.Logf("%s", msg)
		}
	}
}

// KnownDefect pins a catalogued defect that is still live, against Options.Pins. check must return an
// error while the defect is present, describing what it observed; the spec then passes and reports
// "<ref> still present: <error>" (a Ginkgo report entry shown without -v, or t.Logf). When check returns nil
// the defect is gone: the spec fails with "<ref> appears fixed: replace this pin with a positive
// assertion". An empty ref, a ref the catalog does not know, a suite booted without Options.Pins, or a check
// error made with Harness fail the spec; a harness error never keeps a pin green.
func (c *Case) KnownDefect(ref string, check func() error) {
	c.t.Helper()
	knownDefect(c.t, c.s.pins, ref, func() error {
		err := check()
		c.takeScriptErrors(err)
		return err
	}, c.writeEvidence, c.mark)
}

// pinLineMax bounds the length of a pin's report line; the rest of its evidence goes to the artifacts.
const pinLineMax = 200

// writeEvidence writes a pin's whole evidence under the case's artifacts directory and returns the file's
// path, or "" when it cannot be written.
func (c *Case) writeEvidence(ref, full string) string {
	dir := c.ArtifactsDir()
	path := filepath.Join(dir, "pin-"+ref+".txt")
	if os.MkdirAll(dir, 0o755) != nil || os.WriteFile(path, []byte(full+"\n"), 0o644) != nil {
		return ""
	}
	if !c.s.evidenceAsked {
		c.s.evidenceMu.Lock()
		c.s.evidence = append(c.s.evidence, path)
		c.s.evidenceMu.Unlock()
	}
	return path
}

// removeEvidence removes the pin evidence files written to the default artifacts directory, then the
// directories they leave empty (a failure dump beside them keeps its directory).
func (s *Suite) removeEvidence() {
	s.evidenceMu.Lock()
	defer s.evidenceMu.Unlock()
	for _, p := range s.evidence {
		_ = os.Remove(p)
		_ = os.Remove(filepath.Dir(p))
	}
	if len(s.evidence) > 0 {
		_ = os.Remove(s.artifactsDir)
	}
	s.evidence = nil
}
