package suite

import (
	"errors"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// TestBeWriteComposesWithGomega checks the write-order forms docs/architecture.md gives: the next writes in
// order (HaveExactElements), a multiset (ConsistOf), and a filter's Since; and that a mismatch names the
// write and the filter.
func TestBeWriteComposesWithGomega(t *testing.T) {
	g := NewWithT(t)
	t0 := time.Now()
	ws := []Write{
		{Seq: 1, Time: t0, Manager: "op", Controller: "shard", Verb: VerbApply, Subresource: "status", Kind: "Shard", Name: "s"},
		{Seq: 2, Time: t0.Add(time.Millisecond), Manager: "op", Controller: "tablegroup", Verb: VerbApply, Kind: "Shard", Name: "s"},
		{Seq: 3, Time: t0.Add(2 * time.Millisecond), Manager: "op", Controller: "shard", Verb: VerbPatch, Kind: "Pod", Name: "p", Err: errors.New("conflict")},
	}
	status := BeWrite(WriteFilter{Controller: "shard", Subresource: "status"})
	apply := BeWrite(WriteFilter{Controller: "tablegroup", Verb: VerbApply})
	pod := BeWrite(WriteFilter{Kind: "Pod", Name: "p", IncludeRejected: true})
	g.Expect(ws[2]).NotTo(BeWrite(WriteFilter{Kind: "Pod", Name: "p"}), "a refused write matched a filter that leaves refused writes out")

	g.Expect(ws).To(HaveExactElements(status, apply, pod))
	g.Expect(ws).NotTo(HaveExactElements(apply, status, pod), "the order was not checked")
	g.Expect(ws).To(ConsistOf(pod, status, apply))
	g.Expect(ws).NotTo(ConsistOf(status, apply), "a write too many passed a multiset")
	g.Expect(ws[0]).NotTo(BeWrite(WriteFilter{Controller: "shard", Since: t0.Add(time.Millisecond)}), "Since was ignored")

	ok, err := BeWrite(WriteFilter{}).Match("not a write")
	g.Expect(ok).To(BeFalse())
	g.Expect(err).To(MatchError(ContainSubstring("expects a suite.Write, got string")))
	msg := apply.FailureMessage(ws[0])
	for _, want := range []string{"op/shard apply/status Shard/s", "controller=tablegroup verb=apply"} {
		if !strings.Contains(msg, want) {
			t.Errorf("failure message %q does not name %q", msg, want)
		}
	}
}
