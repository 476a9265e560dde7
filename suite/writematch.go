package suite

import (
	"fmt"

	"github.com/onsi/gomega/types"
)

// BeWrite matches one Write whose fields match f (a zero field matches anything; f.Since keeps writes at or
// after it). It composes with Gomega's collection matchers for write-order checks on the recorder:
// HaveExactElements for the next writes in order, ConsistOf for a multiset of writes, and
//
//	Consistently(func() []suite.Write { return c.Writes(suite.WriteFilter{Controller: "shard", Since: t0}) }).
//		WithTimeout(time.Second).Should(BeEmpty())
//
// for no accepted write by a controller over a window (IncludeRejected: no attempt either). BeWrite matches as
// Case.Writes filters, refused writes left out unless the filter includes them. Errors: an actual value that
// is not a Write.
func BeWrite(f WriteFilter) types.GomegaMatcher { return writeMatcher{f} }

type writeMatcher struct{ f WriteFilter }

func (m writeMatcher) Match(actual any) (bool, error) {
	w, ok := actual.(Write)
	if !ok {
		return false, fmt.Errorf("BeWrite expects a suite.Write, got %T", actual)
	}
	return m.f.fits(w), nil
}

func (m writeMatcher) FailureMessage(actual any) string {
	return fmt.Sprintf("expected %v\nto be a write matching %s", actual, m.f)
}

func (m writeMatcher) NegatedFailureMessage(actual any) string {
	return fmt.Sprintf("expected %v\nnot to be a write matching %s", actual, m.f)
}
