package suite

import (
	"strings"
	"testing"

	"github.com/ensembletest/ensemble/internal/recordtb"
)

// TestFieldPathsRejectMalformed: the field paths a spec declares (AllowSharedField, AllowDifference,
// Permits) are checked at the call; a malformed one fails the case with one line naming the path and the
// form to use, and declares nothing. Paths as the stream and OwnershipOf render them pass.
func TestFieldPathsRejectMalformed(t *testing.T) {
	for _, ok := range []string{"data.k", "status", "status.conditions[type=Ready].status", "spec.ports[port=80,protocol=TCP]",
		"spec.finalizers[example.com/f]", "data.app.conf", "status.items[0][1]", "metadata.labels[a]"} {
		if err := checkFieldPath(ok); err != nil {
			t.Errorf("checkFieldPath(%q) = %v, want nil", ok, err)
		}
	}
	for bad, why := range map[string]string{
		"data..a[":     "empty field name",
		"":             "empty",
		".data":        "empty field name",
		"data.":        "ends with a dot",
		"data.a[":      "never closed",
		"data[]":       "empty selector",
		"[type=Ready]": "follows no field name",
		"data]":        "closes no selector",
		"a[x]b":        "put a dot before",
		"a[x[y]]":      "inside a selector",
	} {
		err := checkFieldPath(bad)
		if err == nil || !strings.Contains(err.Error(), why) || !strings.Contains(err.Error(), fieldPathGrammar) {
			t.Errorf("checkFieldPath(%q) = %v, want it to say %q and give the form", bad, err, why)
		}
	}

	declare := func(f func(c *Case)) (*recordtb.TB, *Case) {
		p := &recordtb.TB{TestName: "paths"}
		c := &Case{t: p, s: &Suite{}}
		f(c)
		return p, c
	}
	p, c := declare(func(c *Case) { c.AllowSharedField("ConfigMap", "shared", "data..a[", "on purpose") })
	if len(p.Fatals()) != 1 || strings.Contains(p.Fatals()[0], "\n") || !strings.Contains(p.Fatals()[0], `AllowSharedField("ConfigMap", "shared", "data..a["`) ||
		!strings.Contains(p.Fatals()[0], fieldPathGrammar) || len(c.sharedOK) != 0 {
		t.Fatalf("AllowSharedField of a malformed path: fatals %q, declared %v; want one line naming the path and the form, nothing declared", p.Fatals(), c.sharedOK)
	}
	t.Log(p.Fatals()[0])
	p, c = declare(func(c *Case) { c.AllowSharedField("ConfigMap", "shared", "data.k", "on purpose") })
	if p.Failed() || !c.sharedOK["ConfigMap/shared data.k"] {
		t.Fatalf("AllowSharedField of a good path: fatals %q, declared %v", p.Fatals(), c.sharedOK)
	}
	p, c = declare(func(c *Case) { c.AllowDifference("Shard", "s", "status.podRoles[", "timing") })
	if len(p.Fatals()) != 1 || !strings.Contains(p.Fatals()[0], `"status.podRoles["`) || len(c.differOK) != 0 {
		t.Fatalf("AllowDifference of a malformed path: fatals %q, declared %v", p.Fatals(), c.differOK)
	}
	if _, _, err := flattenPermits([]Permit{Permits(Modified, "ConfigMap", "a", "data.seen", "data..x")}); err == nil ||
		!strings.Contains(err.Error(), `"data..x"`) || !strings.Contains(err.Error(), fieldPathGrammar) {
		t.Fatalf("Permits with a malformed path: %v, want the path and the form named", err)
	}
}
