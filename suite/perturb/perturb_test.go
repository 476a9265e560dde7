package perturb

import (
	"math"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestParseReadsWhatStringWrites(t *testing.T) {
	for _, s := range []string{
		"conflict@multigres/multigres-shard#3",
		"conflict@multigres/multigres-shard:Shard/mg-db-tg-0#3",
		"throttle@matrixone%2",
		"internal@matrixone/cnset~0.25",
		"timeout@kuberay/raycluster:RayCluster/raycluster-sample#1",
		"restart@multigres/multigres-shard#5",
		"stale@multigres/multigres-shard:Pod/mg-db-tg-0-pool-0#1+4",
		"coalesce@matrixone/cnclaim#2",
		"down(pooler)@multigres/multigres-shard#2+10",
		"slow(hakeeper,200ms)@matrixone%2",
		"coalesce@multigres/multigres-shard:Pod/mg-db-tg-0-pool-0^3",
		"restart@dataplane:Pod/mg-db-tg-0-pool-0^2",
		"stale@multigres:Shard/mg-db-tg-0^1+5",
		"stale@capi/machinedeployment#1+15s",
		"coalesce@multigres:Shard/mg-db-tg-0^2+1m30s",
		"stale@infra:Node/<namespace>-cp-0^1+15s",
		"stale@capi/machineset:Machine/*2#1+15s",
		"conflict@capi:Machine/*12%3",
	} {
		p, err := Parse(s)
		if err != nil {
			t.Errorf("Parse(%q): %v", s, err)
			continue
		}
		if got := p.String(); got != s {
			t.Errorf("Parse(%q).String() = %q", s, got)
		}
	}
	p, _ := Parse("slow(hakeeper,200ms)@matrixone:CNClaim/c-0%2+3")
	want := Point{Mode: Slow, System: "hakeeper", Latency: 200 * time.Millisecond, Writer: "matrixone", Object: "CNClaim/c-0", Trigger: Every(2), For: 3}
	if p != want {
		t.Errorf("Parse = %+v, want %+v", p, want)
	}
}

// A name written relative to its case's namespace is the same in every run, and In names the object of the
// case at hand; no namespace leaves a name as it is.
func TestRelativeNamesAreTheSameInEveryRun(t *testing.T) {
	a, b := RelativeName("e-spec-1a2b-cp-0", "e-spec-1a2b"), RelativeName("e-spec-9z8y-cp-0", "e-spec-9z8y")
	if a != "<namespace>-cp-0" || a != b {
		t.Errorf("RelativeName = %q and %q, want <namespace>-cp-0 for both", a, b)
	}
	if got := RelativeName("cp-0", ""); got != "cp-0" {
		t.Errorf("RelativeName without a namespace = %q", got)
	}
	p, err := Parse("conflict@infra:Node/" + a + "#1")
	if err != nil {
		t.Fatal(err)
	}
	in := p.In("e-spec-9z8y")
	if !in.Counts("infra", "Node", "e-spec-9z8y-cp-0", 0) || in.Counts("infra", "Node", "e-spec-1a2b-cp-0", 0) || p.Object != "Node/<namespace>-cp-0" {
		t.Errorf("In = %+v: want it to count the write of the case's Node only, and p unchanged", in)
	}
}

func TestParseNamesWhatIsWrong(t *testing.T) {
	for s, want := range map[string]string{
		"conflict multigres#3":          "no '@'",
		"explode@multigres#3":           `unknown mode "explode": use one of conflict, throttle`,
		"down@multigres#3":              "names the external system",
		"conflict(pooler)@multigres#3":  "takes no system",
		"slow(pooler)@multigres#3":      "needs a latency",
		"slow(pooler,fast)@multigres#3": `latency "fast"`,
		"conflict@multigres":            "no trigger",
		"conflict@#3":                   `writer "" is not`,
		"conflict@a/b/c#3":              `writer "a/b/c" is not`,
		"conflict@multigres:Shard#3":    `object "Shard" is not Kind/name`,
		"conflict@multigres#0":          "positive number",
		"conflict@multigres%x":          "positive number",
		"conflict@multigres~1.5":        "fraction in [1e-06, 1]",
		"conflict@multigres#3+2":        "apply to the held modes",
		"stale@multigres#3+0":           "positive count",
		"stale@multigres^2":             "counts the changes of one object: name it",
		"stale@multigres:Pod/p^0":       "positive number",
		"stale@m/c:Machine/*0#1":        "nor Kind/*k",
		"stale@m/c:Machine/*x#1":        "nor Kind/*k",
		"stale@m/c:Machine/*02#1":       "nor Kind/*k",
		"stale@m/c:Machine/a*2#1":       "nor Kind/*k",
		"stale@m/c:Machine/*2^1":        "not by its place",
	} {
		_, err := Parse(s)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "the form is") {
			t.Errorf("Parse(%q) = %v, want an error with %q and the form", s, err, want)
		}
	}
}

// A point reports and reruns as the trigger it fires on: its string parses back to a point that fires on
// the same counts. (With one field per trigger, a literal could set two, and Fires and String ranked them
// differently.)
func TestAPointReportsTheTriggerItFiresOn(t *testing.T) {
	for _, tr := range []Trigger{Nth(1), Nth(4), Every(2), Every(3), Rate(0.3), Change(1), Change(3)} {
		p := Point{Mode: Stale, Writer: "m", Object: "Pod/p", Trigger: tr, For: 2}
		q, err := Parse(p.String())
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if q != p {
			t.Errorf("Parse(%q) = %+v, want %+v", p, q, p)
		}
		for n := 1; n <= 50; n++ {
			if p.Fires(n) != q.Fires(n) {
				t.Errorf("%s fires on count %d: %v, the point its string reruns: %v", p, n, p.Fires(n), q.Fires(n))
			}
		}
	}
}

// Validate is the check Parse and Case.Perturb share: a literal is refused as its string would be.
func TestValidateRefusesWhatParseRefuses(t *testing.T) {
	for _, c := range []struct {
		p    Point
		want string
		// unwritten is set where String cannot write what is wrong (a latency without a system, a
		// negative For), so Parse is not asked.
		unwritten bool
	}{
		{Point{Mode: Conflict, Writer: "m"}, "no trigger", false},
		{Point{Mode: Conflict, Writer: "m", Trigger: Nth(0)}, "positive number", false},
		{Point{Mode: Conflict, Writer: "m", Trigger: Change(1)}, "name it", false},
		{Point{Mode: Conflict, Writer: "m", Trigger: Rate(2)}, "fraction in [1e-06, 1]", false},
		{Point{Mode: Conflict, Writer: "m", Trigger: Trigger{Kind: 'x', N: 1}}, "no trigger", false},
		{Point{Mode: Slow, System: "s", Writer: "m", Trigger: Nth(1)}, "needs a latency", false},
		{Point{Mode: Conflict, Latency: time.Second, Writer: "m", Trigger: Nth(1)}, "takes no system", true},
		{Point{Mode: Conflict, Writer: "m", Trigger: Nth(1), For: 2}, "held modes", false},
		{Point{Mode: Stale, Writer: "m", Trigger: Nth(1), For: -1}, "positive count", true},
		{Point{Mode: Stale, Writer: "m", Trigger: Nth(1), Lag: -time.Second}, "positive duration", true},
		{Point{Mode: Stale, Writer: "m", Trigger: Nth(1), For: 2, Lag: time.Second}, "keep one", false},
		{Point{Mode: Restart, Writer: "m", Trigger: Nth(1), Lag: time.Second}, "held modes", false},
		{Point{Mode: "boom", Writer: "m", Trigger: Nth(1)}, "unknown mode", false},
		{Point{Mode: Conflict, Writer: "m", Object: "Pod", Trigger: Nth(1)}, "not Kind/name", false},
		{Point{Mode: Conflict, Writer: "m", Trigger: Rate(math.NaN())}, "fraction in", false},
		{Point{Mode: Conflict, Writer: "m", Trigger: Trigger{Kind: NthWrite, N: 1, Rate: 0.5}}, "sets a Rate too", true},
		{Point{Mode: Conflict, Writer: "op:v2", Trigger: Nth(1)}, "can carry", false},
		{Point{Mode: Conflict, Writer: "m", Object: "Pod/a#b", Trigger: Nth(1)}, "can carry", false},
		{Point{Mode: Conflict, Writer: "m", Object: "Pod/*-1", Trigger: Nth(1)}, "nor Kind/*k", false},
		{Point{Mode: Restart, Writer: "m", Object: "Pod/*1", Trigger: Change(1)}, "not by its place", false},
	} {
		err := c.p.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: Validate() = %v, want %q", c.p, err, c.want)
		}
		if _, perr := Parse(c.p.String()); perr == nil && !c.unwritten {
			t.Errorf("%+v: Validate refuses it, Parse(%q) accepts it", c.p, c.p.String())
		}
	}
}

func TestFiresAndCounts(t *testing.T) {
	nth := Point{Mode: Conflict, Writer: "m/c", Trigger: Nth(3)}
	every := Point{Mode: Conflict, Writer: "m", Trigger: Every(2)}
	rate := Point{Mode: Conflict, Writer: "m", Trigger: Rate(0.3)}
	var fired []int
	hits := 0
	for n := 1; n <= 1000; n++ {
		if nth.Fires(n) {
			fired = append(fired, n)
		}
		if rate.Fires(n) {
			hits++
		}
		if rate.Fires(n) != rate.Fires(n) {
			t.Fatalf("rate point is not deterministic at %d", n)
		}
	}
	if len(fired) != 1 || fired[0] != 3 {
		t.Errorf("#3 fired at %v", fired)
	}
	if !every.Fires(4) || every.Fires(5) {
		t.Error("%2 must fire on 4 and not on 5")
	}
	if hits < 250 || hits > 350 {
		t.Errorf("~0.3 fired %d times in 1000", hits)
	}
	if !nth.Counts("m/c", "Shard", "a", 0) || nth.Counts("m/cx", "Shard", "a", 0) || nth.Counts("m", "Shard", "a", 0) {
		t.Error("writer m/c counts only m/c's writes")
	}
	if !every.Counts("m/c", "Shard", "a", 0) || !every.Counts("m", "Shard", "a", 0) || every.Counts("mx/c", "Shard", "a", 0) {
		t.Error("writer m counts every write of manager m")
	}
	obj := Point{Mode: Conflict, Writer: "m", Object: "Shard/a", Trigger: Nth(1)}
	if !obj.Counts("m/c", "Shard", "a", 0) || obj.Counts("m/c", "Shard", "b", 0) {
		t.Error("an object narrows the counted writes to it")
	}
	change := Point{Mode: Conflict, Writer: "m/c", Object: "Pod/p", Trigger: Change(2)}
	if change.Counts("m/c", "Pod", "p", 0) {
		t.Error("a change trigger counts no write")
	}
	if !change.Fires(2) || change.Fires(3) || !change.Refuses("m/c") || change.Refuses("m/d") || obj.Refuses("m/c") {
		t.Error("a fired change trigger of a fault mode refuses its writer's writes, on any object")
	}
	if change.Manager() != "m" || every.Manager() != "m" {
		t.Error("Manager is the part of Writer before the '/'")
	}
}

// A point on an object by its place counts the writes on the writer's k-th object of the kind, in the order
// of the writer's first write to each, however its writes on other objects interleave: two runs that wrote
// the same objects (named anew each run) in another interleaving fire on the same object's same write.
func TestAPlaceCountsTheSameObjectsWritesHoweverWritesInterleave(t *testing.T) {
	p, err := Parse("stale@capi/machineset:Machine/*2#1+15s")
	if err != nil {
		t.Fatal(err)
	}
	if kind, k, ok := p.Place(); kind != "Machine" || k != 2 || !ok {
		t.Fatalf("Place() = %q, %d, %v; want Machine, 2, true", kind, k, ok)
	}
	type write struct{ writer, kind, name string }
	fires := func(p Point, ws []write) []string {
		var places Places
		var out []string
		n := 0
		for _, w := range ws {
			if p.Counts(w.writer, w.kind, w.name, p.PlaceOf(&places, w.writer, "update", w.kind, w.name)) {
				if n++; p.Fires(n) {
					out = append(out, w.kind+"/"+w.name)
				}
			}
		}
		return out
	}
	// Run a: a status write between the Machine creates; run b: the first Machine's create, another
	// writer's Machines and status writes before the second.
	a := []write{{"capi/machineset", "MachineSet", "ms-x"}, {"capi/machineset", "Machine", "ms-x-aaaa"},
		{"capi/machineset", "MachineSet", "ms-x"}, {"capi/machineset", "Machine", "ms-x-bbbb"}, {"capi/machineset", "Machine", "ms-x-bbbb"}}
	b := []write{{"capi/machineset", "Machine", "ms-y-cccc"}, {"capi/machine", "Machine", "ms-y-cccc"},
		{"capi/machine", "Machine", "cp-0"}, {"capi/machineset", "MachineSet", "ms-y"}, {"capi/machineset", "MachineSet", "ms-y"},
		{"capi/machineset", "Machine", "ms-y-cccc"}, {"capi/machineset", "Machine", "ms-y-dddd"}}
	if got := fires(p, a); len(got) != 1 || got[0] != "Machine/ms-x-bbbb" {
		t.Errorf("run a fired on %q, want the second Machine's create only", got)
	}
	if got := fires(p, b); len(got) != 1 || got[0] != "Machine/ms-y-dddd" {
		t.Errorf("run b fired on %q, want the second Machine's create only", got)
	}
	// The writer-wide count a place replaces fires on the second Machine in run a, the first in run b.
	nth := Point{Mode: Stale, Writer: "capi/machineset", Trigger: Nth(4)}
	if ga, gb := fires(nth, a), fires(nth, b); len(ga) != 1 || len(gb) != 1 || ga[0] != "Machine/ms-x-bbbb" || gb[0] != "Machine/ms-y-cccc" {
		t.Errorf("#4 fired on %q and %q", ga, gb)
	}
	// Another writer's objects take no place, and a change trigger numbers nothing.
	var places Places
	if got := p.PlaceOf(&places, "capi/machine", "update", "Machine", "m"); got != 0 {
		t.Errorf("another writer's Machine took place %d", got)
	}
	if got := (Point{Mode: Stale, Writer: "capi", Object: "Machine/m", Trigger: Change(1)}).PlaceOf(&places, "capi", "update", "Machine", "m"); got != 0 {
		t.Errorf("a point on a named object numbered place %d", got)
	}
	// A write without a name is a new object when it is a create (generateName), on no object otherwise.
	if got := p.PlaceOf(&places, "capi/machineset", "deleteallof", "Machine", ""); got != 0 {
		t.Errorf("a delete of all Machines took place %d", got)
	}
	if got := p.PlaceOf(&places, "capi/machineset", VerbCreate, "Machine", ""); got != 1 {
		t.Errorf("a create without a name took place %d, want 1", got)
	}
}

// A create with generateName has no name before the API server answers: it takes the next place, and the
// name its answer carries keeps that place for the object's later writes.
func TestAWriteWithoutANameIsANewObject(t *testing.T) {
	var pl Places
	if got := pl.Of("Pod", "a"); got != 1 {
		t.Fatalf("first pod at %d", got)
	}
	unnamed := pl.Of("Pod", "")
	refused := pl.Of("Pod", "")
	if unnamed != 2 || refused != 3 {
		t.Fatalf("creates without a name at %d and %d, want 2 and 3", unnamed, refused)
	}
	pl.Name("Pod", "p-x7k2q", unnamed)
	if got := pl.Of("Pod", "p-x7k2q"); got != 2 {
		t.Errorf("the named create's object at %d, want 2", got)
	}
	if got, other := pl.Of("Pod", "b"), pl.Of("Svc", "b"); got != 4 || other != 1 {
		t.Errorf("next pod at %d (want 4), first Svc at %d (want 1)", got, other)
	}
	pl.Name("Pod", "a", 9)
	if got := pl.Of("Pod", "a"); got != 1 {
		t.Errorf("Name moved a named object to %d", got)
	}
}

func TestErrorIsTheAPIServersKind(t *testing.T) {
	gr := schema.GroupResource{Group: "multigres.com", Resource: "shards"}
	for m, is := range map[Mode]func(error) bool{
		Conflict: apierrors.IsConflict, Throttle: apierrors.IsTooManyRequests,
		Internal: apierrors.IsInternalError, Timeout: apierrors.IsTimeout,
	} {
		err := Point{Mode: m, Writer: "m", Trigger: Nth(1)}.Error(gr, "a")
		if !is(err) || !strings.Contains(err.Error(), "injected by point "+string(m)+"@m#1") {
			t.Errorf("%s: %v", m, err)
		}
	}
	if (Point{Mode: Restart}).Error(gr, "a") != nil {
		t.Error("restart is no fault")
	}
}

func TestDiffComparesFieldByFieldAndLeavesOutVolatileFields(t *testing.T) {
	base := map[string]map[string]string{
		"Shard/a":     {"status.phase": "Healthy", "status.observedGeneration": "2", "status.started": "x1", "spec.replicas": "3"},
		"Pod/p-0":     {"spec.nodeName": "n"},
		"Service/odd": {"spec.type": "ClusterIP"},
	}
	base2 := map[string]map[string]string{
		"Shard/a": {"status.phase": "Healthy", "status.observedGeneration": "3", "status.started": "x2", "spec.replicas": "3"},
		"Pod/p-0": {"spec.nodeName": "n"},
	}
	got := map[string]map[string]string{
		"Shard/a": {"status.phase": "Progressing", "status.observedGeneration": "9", "status.started": "x9", "status.extra": "1"},
		"Pod/p-1": {"spec.nodeName": "n"},
	}
	want := []string{
		"Pod/p-0: missing (the unperturbed run ended with it)",
		"Pod/p-1: unexpected (the unperturbed run ended without it)",
		"Shard/a spec.replicas: 3 -> <absent>",
		"Shard/a status.extra: <absent> -> 1",
		"Shard/a status.phase: Healthy -> Progressing",
	}
	d := lines(Diff([]map[string]map[string]string{base, base2}, got))
	if strings.Join(d, "\n") != strings.Join(want, "\n") {
		t.Errorf("Diff:\n%s\nwant:\n%s", strings.Join(d, "\n"), strings.Join(want, "\n"))
	}
	hashed := func(key string) map[string]map[string]string {
		return map[string]map[string]string{"ConfigMap/c": {"data.config.toml-" + key: "x", "data.other": "1"}}
	}
	if d := Diff([]map[string]map[string]string{hashed("a1"), hashed("b2")}, hashed("c3")); len(d) != 0 {
		t.Errorf("a key named after a run-specific hash differs: %v", d)
	}
	if d := Diff([]map[string]map[string]string{hashed("a1"), hashed("a1")}, hashed("c3")); len(d) != 2 {
		t.Errorf("a key both unperturbed runs agree on must be compared: %v", d)
	}
	named := func(names ...string) map[string]map[string]string {
		m := map[string]map[string]string{"Pod/fixed": {"spec.x": "1"}}
		for _, n := range names {
			m["Pod/"+n] = map[string]string{"spec.x": "1"}
		}
		return m
	}
	b1, b2 := named("a1", "a2"), named("b1", "b2")
	if d := Diff([]map[string]map[string]string{b1, b2}, named("c1", "c2")); len(d) != 0 {
		t.Errorf("objects named anew each run, as many as unperturbed: %v", d)
	}
	if d := Diff([]map[string]map[string]string{b1, b2}, named("c1", "c2", "c3")); len(d) != 1 || d[0].String() != "Pod: 3 objects named anew each run, the unperturbed runs ended with 2" {
		t.Errorf("one more object named anew: %v", d)
	}
	if d := Diff([]map[string]map[string]string{base}, base); len(d) != 0 {
		t.Errorf("a run equal to its baseline differs: %v", d)
	}
	// Two unperturbed runs in the same second agree on a timestamp by chance (cluster-api's Machine
	// status.lastUpdated, seen as the only difference of two points that changed nothing); a date that is no
	// timestamp is compared.
	at := func(v string) map[string]map[string]string {
		return map[string]map[string]string{"Machine/cp-0": {"status.lastUpdated": v, "spec.version": "2026-12-06"}}
	}
	same := at("2026-12-06T04:16:20Z")
	if d := Diff([]map[string]map[string]string{same, same}, at("2026-12-06T04:17:09Z")); len(d) != 0 {
		t.Errorf("a timestamp both unperturbed runs share is compared: %v", d)
	}
	other := at("2026-12-06T04:16:20Z")
	other["Machine/cp-0"]["spec.version"] = "v2"
	if d := Diff([]map[string]map[string]string{same, same}, other); len(d) != 1 {
		t.Errorf("a field that only looks like a date must be compared: %v", d)
	}
	// An address is handed out by the run: a second run in one test process (explore's batches) got the
	// kubelet stand-in's next pod IPs, and KubeRay's status.head.serviceIP differed in every such run. A value
	// that only contains an address is compared.
	addr := func(ip, url string) map[string]map[string]string {
		return map[string]map[string]string{"RayCluster/demo": {"status.head.serviceIP": ip, "status.endpoint": ip + ":8265", "spec.url": url}}
	}
	first := addr("239.244.0.1", "http://demo")
	if d := Diff([]map[string]map[string]string{first, first}, addr("239.244.0.4", "http://demo")); len(d) != 0 {
		t.Errorf("an address both unperturbed runs share is compared: %v", d)
	}
	if d := Diff([]map[string]map[string]string{first, first}, addr("fd00::4", "http://239.244.0.4/")); len(d) != 1 || d[0].Path != "spec.url" {
		t.Errorf("a URL that holds an address must be compared: %v", d)
	}
	if Diff(nil, got) != nil {
		t.Error("no baseline, no difference")
	}
}

// lines renders differences one per line.
func lines(ds []Difference) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.String())
	}
	return out
}

func TestParseRunsSplitsRunsAndNamesTheBadOne(t *testing.T) {
	runs, err := ParseRuns("conflict@a#1|| throttle@b%2")
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 3 || len(runs[0]) != 1 || len(runs[1]) != 0 || len(runs[2]) != 1 {
		t.Fatalf("ParseRuns gave %v, want 3 runs of 1, 0 and 1 points", runs)
	}
	if runs, err := ParseRuns(""); err != nil || len(runs) != 1 || len(runs[0]) != 0 {
		t.Errorf(`ParseRuns("") = %v, %v, want one unperturbed run`, runs, err)
	}
	if _, err := ParseRuns("conflict@a"); err == nil || strings.HasPrefix(err.Error(), "run ") {
		t.Errorf("one run's error = %v, want ParseList's without a run number", err)
	}
	if _, err := ParseRuns("conflict@a#1|conflict@a"); err == nil || !strings.HasPrefix(err.Error(), "run 2: ") {
		t.Errorf("second run's error = %v, want it to start with \"run 2: \"", err)
	}
}
