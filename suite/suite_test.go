package suite

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onsi/gomega/types"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/config"

	"github.com/ensembletest/ensemble/internal/recordtb"
	"github.com/ensembletest/ensemble/suite/perturb"
)

type catalog map[string]string

func (c catalog) Lookup(ref string) (string, bool) { t, ok := c[ref]; return t, ok }

func TestKnownDefectVerdicts(t *testing.T) {
	cat := catalog{"X-1": "a defect"}
	cases := []struct {
		name, ref string
		err       error
		wantFatal string
		wantLog   string
	}{
		{"present", "X-1", errors.New("flapped 4 times"), "", "X-1 still present: flapped 4 times"},
		{"fixed", "X-1", nil, "X-1 appears fixed: replace this pin with a positive assertion", ""},
		{"empty ref", " ", errors.New("x"), "empty reference", ""},
		{"unknown ref", "X-2", errors.New("x"), "no such defect in the catalog", ""},
		{"harness error", "X-1", Harness(errors.New("setup timed out")), "not the defect", ""},
	}
	t.Run("long evidence", func(t *testing.T) {
		p := &recordtb.TB{}
		var kept string
		long := "flapped 4 times\n" + strings.Repeat("a change\n", 10000)
		knownDefect(p, cat, "X-1", func() error { return errors.New(long) }, func(ref, full string) string { kept = full; return "/artifacts/pin-X-1.txt" }, nil)
		if len(p.Reports()) != 1 || p.Reports()[0] != "KnownDefect X-1: X-1 still present: flapped 4 times (evidence: /artifacts/pin-X-1.txt)" || kept != long {
			t.Fatalf("reports = %q (kept %d bytes): want one short line naming the evidence file, and the whole evidence kept", p.Reports(), len(kept))
		}
	})
	t.Run("no catalog", func(t *testing.T) {
		p := &recordtb.TB{}
		knownDefect(p, nil, "MG-NOPE", func() error { return errors.New("x") }, nil, nil)
		if len(p.Fatals()) != 1 || !strings.Contains(p.Fatals()[0], "Options.Pins is not set") {
			t.Fatalf("fatals = %q: a pin checked against no catalog must fail", p.Fatals())
		}
	})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := &recordtb.TB{}
			var marked []string
			knownDefect(p, cat, tc.ref, func() error { return tc.err }, nil, func(msg string) { marked = append(marked, msg) })
			if tc.wantFatal != "" {
				if len(p.Fatals()) != 1 || !strings.Contains(p.Fatals()[0], tc.wantFatal) {
					t.Fatalf("fatals = %q, want one containing %q", p.Fatals(), tc.wantFatal)
				}
				if len(marked) != 1 || marked[0] != p.Fatals()[0] {
					t.Fatalf("marked = %q, want the failing verdict %q marked for the timeline", marked, p.Fatals()[0])
				}
				return
			}
			if p.Failed() || len(p.Reports()) != 1 || !strings.Contains(p.Reports()[0], tc.wantLog) {
				t.Fatalf("failed=%v reports=%q, want a passing pin reporting %q", p.Failed(), p.Reports(), tc.wantLog)
			}
			if len(marked) != 0 {
				t.Fatalf("marked = %q: a pin still present is no failure", marked)
			}
		})
	}
}

func TestGateNests(t *testing.T) {
	g := newGate()
	if g.admitted("a") || g.admitted("") {
		t.Fatal("a fresh gate admits nothing")
	}
	g.admit("a")
	g.admit("a")
	g.close("a")
	if !g.admitted("a") {
		t.Fatal("one close undid two admits")
	}
	g.close("a")
	if g.admitted("a") {
		t.Fatal("a closed namespace is still admitted")
	}
}

// TestAllGroupsPermits checks that All joins permits without ordering them, and that Before over an All
// orders the group as a whole: a before each of b and c, b and c unordered, c's own order kept.
func TestAllGroupsPermits(t *testing.T) {
	a, b := Permits(Added, "Shard", "a"), Permits(Added, "Pod", "b")
	c := Before(Permits(Added, "Pod", "c"), Permits(Deleted, "Pod", "c"))
	leaves, order, err := flattenPermits([]Permit{Before(a, All(b, c))})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(leafLines(leaves), ", "); got != "Added Shard/a, Added Pod/b, Added Pod/c, Deleted Pod/c" {
		t.Fatalf("leaves %s", got)
	}
	var pairs []string
	for _, o := range order {
		pairs = append(pairs, o[0].String()+" < "+o[1].String())
	}
	want := []string{"Added Pod/c < Deleted Pod/c", "Added Shard/a < Added Pod/b", "Added Shard/a < Added Pod/c", "Added Shard/a < Deleted Pod/c"}
	sort.Strings(pairs)
	if strings.Join(pairs, "; ") != strings.Join(want, "; ") {
		t.Fatalf("orders %q, want %q", pairs, want)
	}
	if _, _, err := flattenPermits([]Permit{All()}); err == nil {
		t.Fatal("a step permitting All() of nothing was accepted")
	}
}

func TestStreamDiffIgnoresBookkeeping(t *testing.T) {
	a := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", ResourceVersion: "1"},
		Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}}}
	b := a.DeepCopy()
	b.ResourceVersion = "2"
	b.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "m"}}
	b.Status.Conditions[0].LastTransitionTime = metav1.Now()
	if d := diffFlat(flatten(a), flatten(b)); len(d) != 0 {
		t.Fatalf("bookkeeping-only update reported as a change: %v", d)
	}
	b.Status.Conditions[0].Status = corev1.ConditionTrue
	d := diffFlat(flatten(a), flatten(b))
	if len(d) != 1 || d[0].Path != "status.conditions[type=Ready].status" || d[0].Old != "False" || d[0].New != "True" {
		t.Fatalf("diff = %+v, want the Ready condition's status False -> True", d)
	}
}

func TestBootRejectsBadInput(t *testing.T) {
	t.Setenv("KUBEBUILDER_ASSETS", t.TempDir())
	for name, tc := range map[string]struct {
		opts Options
		want string
		env  map[string]string
	}{
		"nil scheme":      {Options{}, "Options.Scheme is nil", nil},
		"empty name":      {Options{Scheme: newScheme(), Managers: []ManagerOptions{{Register: noop}}}, "Name is empty", nil},
		"reserved name":   {Options{Scheme: newScheme(), Managers: []ManagerOptions{{Name: "case", Register: noop}}}, `not a plain name`, nil},
		"name with space": {Options{Scheme: newScheme(), Managers: []ManagerOptions{{Name: "my op", Register: noop}}}, `not a plain name`, nil},
		"duplicate name":  {Options{Scheme: newScheme(), Managers: []ManagerOptions{{Name: "a", Register: noop}, {Name: "a", Register: noop}}}, `both named "a"`, nil},
		"own HTTP client": {Options{Scheme: newScheme(), Managers: []ManagerOptions{{Name: "a", Register: noop, Client: client.Options{HTTPClient: http.DefaultClient}}}}, `sets Client.HTTPClient: leave it nil`, nil},
		"own cache reader": {Options{Scheme: newScheme(), Managers: []ManagerOptions{{Name: "a", Register: noop,
			Client: client.Options{Cache: &client.CacheOptions{Reader: someReader{}}}}}}, `sets Client.Cache.Reader: leave it nil`, nil},
		"no binaries":    {Options{Scheme: newScheme()}, "make envtest-assets", nil},
		"wrong CRD path": {Options{Scheme: newScheme(), CRDDirectoryPaths: []string{"operators/nope/config/crd"}}, "does not exist", nil},
		"nil CRD":        {Options{Scheme: newScheme(), CRDs: []*apiextensionsv1.CustomResourceDefinition{nil}}, "Options.CRDs[0] is nil", nil},
		"unnamed CRD":    {Options{Scheme: newScheme(), CRDs: []*apiextensionsv1.CustomResourceDefinition{{}}}, "Options.CRDs[0] has no metadata.name", nil},
		"CRD twice":      {Options{Scheme: newScheme(), CRDs: []*apiextensionsv1.CustomResourceDefinition{gadgetCRD(), gadgetCRD()}}, `Options.CRDs[0] and [1] are both named "gadgets.example.com"`, nil},
		"bad timeline":   {Options{Scheme: newScheme()}, "ENSEMBLE_TIMELINE=\"[\" is neither 1 nor a regexp", nil},
		"bad point": {Options{Scheme: newScheme()}, `ENSEMBLE_PERTURB: perturb: point "conflict@a": no trigger`,
			map[string]string{"ENSEMBLE_PERTURB": "conflict@a"}},
		"bad mutant": {Options{Scheme: newScheme()}, `ENSEMBLE_MUTANTS: run 2's mutant "x" is no ID`,
			map[string]string{"ENSEMBLE_MUTANTS": "3|x"}},
		"bad skip list": {Options{Scheme: newScheme()}, `ENSEMBLE_MUTANTS_SKIP: invalid character 'x' looking for beginning of value: give a JSON object`,
			map[string]string{"ENSEMBLE_MUTANTS": "3|4", "ENSEMBLE_MUTANTS_RETRY": "1", "ENSEMBLE_MUTANTS_SKIP": "x"}},
		"skip list of run 0": {Options{Scheme: newScheme()}, `ENSEMBLE_MUTANTS_SKIP: spec "s" skips run 0: runs count from 1`,
			map[string]string{"ENSEMBLE_MUTANTS": "3|4", "ENSEMBLE_MUTANTS_RETRY": "1", "ENSEMBLE_MUTANTS_SKIP": `{"s": [0]}`}},
		"empty baseline":           {Options{Scheme: newScheme()}, "ENSEMBLE_BASELINE: no case record (*.json) in", map[string]string{"ENSEMBLE_BASELINE": os.TempDir() + "/ensemble-no-such-baseline"}},
		"external without name":    {Options{Scheme: newScheme(), Externals: []External{{Down: down, Slow: slow}}}, "Externals[0] has an empty Name", nil},
		"external name with (":     {Options{Scheme: newScheme(), Externals: []External{{Name: "pool(er", Down: down, Slow: slow}}}, `Name "pool(er" holds one of`, nil},
		"external name with space": {Options{Scheme: newScheme(), Externals: []External{{Name: "po oler", Down: down, Slow: slow}}}, `Name "po oler" holds one of`, nil},
		"external name with comma": {Options{Scheme: newScheme(), Externals: []External{{Name: "a,b", Down: down, Slow: slow}}}, `Name "a,b" holds one of`, nil},
		"duplicate external":       {Options{Scheme: newScheme(), Externals: []External{{Name: "x", Down: down, Slow: slow}, {Name: "x", Down: down, Slow: slow}}}, `Externals[0] and [1] are both named "x"`, nil},
		"external without Down":    {Options{Scheme: newScheme(), Externals: []External{{Name: "x", Slow: slow}}}, `("x") has no Down`, nil},
		"external without Slow":    {Options{Scheme: newScheme(), Externals: []External{{Name: "x", Down: down}}}, `("x") has no Slow`, nil},
	} {
		t.Run(name, func(t *testing.T) {
			if name == "bad timeline" {
				t.Setenv("ENSEMBLE_TIMELINE", "[")
			}
			for k, v := range tc.env {
				// Past the binaries' check, which comes first.
				t.Setenv("KUBEBUILDER_ASSETS", fakeAssets(t))
				t.Setenv(k, v)
			}
			if name == "wrong CRD path" || strings.Contains(name, "CRD") {
				t.Setenv("KUBEBUILDER_ASSETS", fakeAssets(t))
			}
			_, err := Boot(t.Context(), tc.opts)
			t.Log(err)
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("Boot error = %v, want one line containing %q", err, tc.want)
			}
		})
	}
}

// someReader is a client.Reader an operator might hand as Client.Cache.Reader, for the validation tests.
type someReader struct{ client.Reader }

// down and slow are External funcs that do nothing, for the validation tests.
func down(string, bool)          {}
func slow(string, time.Duration) {}

// TestExternalsByName checks that Boot's validation keeps the registered systems by Name and that looking
// up one that is not registered names those that are.
func TestExternalsByName(t *testing.T) {
	byName, err := validateExternals([]External{{Name: "pooler", Down: down, Slow: slow}, {Name: "hakeeper", Down: down, Slow: slow}})
	if err != nil {
		t.Fatal(err)
	}
	s := &Suite{externals: byName}
	if e, err := s.external("hakeeper"); err != nil || e.Name != "hakeeper" {
		t.Fatalf("external(hakeeper) = %+v, %v", e, err)
	}
	if _, err := s.external("etcd"); err == nil || !strings.Contains(err.Error(), `no external system "etcd": Options.Externals registers hakeeper, pooler`) {
		t.Fatalf("external(etcd) = %v, want the registered names", err)
	}
	if _, err := (&Suite{}).external("etcd"); err == nil || !strings.Contains(err.Error(), "registers none") {
		t.Fatalf("external(etcd) with none registered = %v", err)
	}
	// A name validation accepts is one a point's text carries back unchanged.
	for _, name := range []string{"pooler", "topo-store.v2", "hk_1#a%b~c"} {
		if _, err := validateExternals([]External{{Name: name, Down: down, Slow: slow}}); err != nil {
			t.Fatalf("%q refused: %v", name, err)
		}
		for _, p := range []perturb.Point{{Mode: perturb.Down, System: name, Writer: "op", Trigger: perturb.Nth(1)}, {Mode: perturb.Slow, System: name, Latency: time.Second, Writer: "op", Trigger: perturb.Every(2)}} {
			back, err := perturb.Parse(p.String())
			if err != nil || back != p {
				t.Fatalf("point %q parses to %+v, %v; want %+v", p.String(), back, err, p)
			}
		}
	}
}

func TestCRDPathErrors(t *testing.T) {
	write := func(name, content string) string {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	crd := "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: a.example.com\n"
	for _, tc := range []struct {
		name, want string
		path       string
	}{
		{"missing path", "does not exist", "no/such/dir"},
		{"empty dir", "holds no .yaml", t.TempDir()},
		{"malformed YAML", "bad.yaml: document 2: error converting YAML to JSON: yaml: line 6", write("bad.yaml", crd+"---\nkind: [\n  - x\n")},
		{"no CRD in it", "holds no CustomResourceDefinition", write("cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n")},
	} {
		_, err := resolveCRDPaths([]string{tc.path})
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v, want one line containing %q", tc.name, err, tc.want)
		}
	}
	if _, err := resolveCRDPaths([]string{write("ok.yaml", crd)}); err != nil {
		t.Errorf("a directory with one CRD: %v", err)
	}
}

func TestOwnershipPaths(t *testing.T) {
	p := &corev1.Pod{}
	p.ManagedFields = []metav1.ManagedFieldsEntry{
		{Manager: "a", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:status":{"f:podRoles":{".":{},"f:p-0":{}},"f:conditions":{"k:{\"type\":\"Available\"}":{".":{},"f:status":{}}}}}`)}},
		{Manager: "mini-multigres", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:status":{"f:podRoles":{"f:p-0":{}}}}`)}},
	}
	o, err := OwnershipOf(p)
	if err != nil {
		t.Fatal(err)
	}
	if got := o.Owners("status.podRoles"); len(got) != 2 {
		t.Fatalf("podRoles owners = %v, want both managers", got)
	}
	if got := o.Owners("status.conditions[type=Available]"); len(got) != 1 || got[0] != "a" {
		t.Fatalf("Available owners = %v", got)
	}
	p.Name, p.Namespace = "p", "ns"
	for _, tc := range []struct {
		m    types.GomegaMatcher
		want string
	}{
		{HaveSingleFieldOwners(), "status.podRoles.p-0 is owned by a, mini-multigres"},
		{HaveFieldManagersWithin("a"), "mini-multigres (undeclared) owns status.podRoles.p-0"},
	} {
		if ok, err := tc.m.Match(p); ok || err != nil {
			t.Fatalf("%T matched a pod with a co-owned field (err %v)", tc.m, err)
		}
		if msg := tc.m.FailureMessage(p); !strings.Contains(msg, tc.want) || !strings.Contains(msg, "ns/p") {
			t.Fatalf("failure message %q does not name %q and the object", msg, tc.want)
		}
	}
	if ok, err := HaveFieldManagersWithin("a", "mini-multigres").Match(p); !ok || err != nil {
		t.Fatalf("declared managers refused (err %v)", err)
	}
	p.ManagedFields = p.ManagedFields[:1]
	if ok, err := HaveSingleFieldOwners().Match(p); !ok || err != nil {
		t.Fatalf("single owners refused (err %v)", err)
	}
	// One manager's Apply and Update entries on one field (a status apply and a status patch under one field
	// owner) are one owner.
	p.ManagedFields = append(p.ManagedFields, metav1.ManagedFieldsEntry{Manager: "a", Operation: metav1.ManagedFieldsOperationUpdate,
		Subresource: "status", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:status":{"f:podRoles":{"f:p-0":{}}}}`)}})
	if ok, err := HaveSingleFieldOwners().Match(p); !ok || err != nil {
		t.Fatalf("one manager's two entries on one field taken for two owners: %s (err %v)", HaveSingleFieldOwners().FailureMessage(p), err)
	}
	if _, err := HaveSingleFieldOwners().Match("not an object"); err == nil {
		t.Fatal("a matcher given no object must say so")
	}
	if _, err := HaveSingleFieldOwners().Match((*corev1.Pod)(nil)); err == nil {
		t.Fatal("a matcher given a nil object must say so")
	}
	if _, err := HaveFieldManagersWithin("nobody").Match(&corev1.Pod{}); err == nil || !strings.Contains(err.Error(), "no managedFields") {
		t.Fatalf("a matcher given an object never read back passed: %v", err)
	}
}

// fakeAssets returns a directory holding empty kube-apiserver and etcd files: enough for the assets check, for tests
// that must fail before anything starts.
func fakeAssets(t *testing.T) string {
	dir := t.TempDir()
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if err := os.WriteFile(filepath.Join(dir, b), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestOperatorTimelineUndoesCompression(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ps := []Pass{
		{Start: at(0), End: at(1), Asked: 10 * time.Second, RequeueAfter: 50 * time.Millisecond, Event: true},
		// asked 10 s, handed 50 ms; the requeue woke it: 10 s of operator time
		{Start: at(52), End: at(53), Asked: 10 * time.Second, RequeueAfter: 50 * time.Millisecond, Requeued: true},
		// an event woke it 900 ms later, after the compressed requeue was due (a loaded machine delivered
		// it late): wall time, 900 ms, as the queue says an event woke it
		{Start: at(952), End: at(953), Event: true},
		// no delayed requeue asked before it: wall time, 101 ms
		{Start: at(1053), End: at(1054), Asked: time.Second, RequeueAfter: 50 * time.Millisecond, Event: true},
		// its requeue of 1 s woke it: 1 s
		{Start: at(1105), End: at(1106), Requeued: true},
	}
	got := OperatorTimeline(ps)
	want := []time.Duration{0, 10 * time.Second, 10*time.Second + 900*time.Millisecond, 11*time.Second + time.Millisecond, 12*time.Second + time.Millisecond}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("timeline = %v, want %v", got, want)
		}
	}
	if w := CountWakes(ps); w != (Wakes{Events: 2, Requeues: 2, RequeueTime: 11 * time.Second}) {
		t.Fatalf("CountWakes = %+v, want 2 events, 2 requeues, 11 s of requeue time", w)
	}
}

// TestAnErrorRetryIsNoRequeue: a pass that returned an error is retried by controller-runtime's rate limiter,
// whatever delay it asked; the next pass is neither requeue-woken nor event-woken, and its gap is wall time.
func TestAnErrorRetryIsNoRequeue(t *testing.T) {
	r := newRecorder(newScheme(), newBroadcast(), newScopes())
	req := ctrl.Request{}
	req.Namespace, req.Name = "ns", "a"
	first := r.beginPass("m", "c", req, nil)
	r.endPass(first, false, errors.New("boom"), 50*time.Millisecond, 30*time.Second)
	retry := r.beginPass("m", "c", req, nil)
	if retry.Requeued || retry.Event {
		t.Fatalf("the retry of a failed pass: Requeued %v, Event %v; want neither", retry.Requeued, retry.Event)
	}
	r.endPass(retry, false, nil, 50*time.Millisecond, 30*time.Second)
	if next := r.beginPass("m", "c", req, nil); !next.Requeued {
		t.Fatal("a pass after one that succeeded and asked 30 s: want Requeued")
	}
}

// TestSubresourceCreateKeepsNoResourceVersion: a pods/binding create answers with a Status, not the pod, so
// the recorder must not take a resourceVersion for the one the write made (a timeline would call the binding
// a write that changed nothing, FieldWriters would credit it with an earlier change); an update's answer
// carries the new one. The transport reads both from the wire, whatever client sent them.
func TestSubresourceCreateKeepsNoResourceVersion(t *testing.T) {
	scheme := newScheme()
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(corev1.SchemeGroupVersion.WithKind("Pod"), meta.RESTScopeNamespace)
	s := &Suite{rec: newRecorder(scheme, newBroadcast(), newScopes()), scheme: scheme,
		Client: fake.NewClientBuilder().WithScheme(scheme).WithRESTMapper(mapper).Build()}
	apiServer := roundTripFunc(func(req *http.Request) (*http.Response, error) {
		body := `{"kind":"Pod","apiVersion":"v1","metadata":{"namespace":"ns","name":"p","uid":"u1","resourceVersion":"8"}}`
		if strings.HasSuffix(req.URL.Path, "/binding") {
			body = `{"kind":"Status","apiVersion":"v1","status":"Success","code":201}`
		}
		return &http.Response{StatusCode: 201, Header: http.Header{"Content-Type": []string{"application/json"}},
			Body: io.NopCloser(strings.NewReader(body)), Request: req}, nil
	})
	rt := &recordingTransport{s: s, w: writer{manager: "dataplane"}, next: apiServer}
	send := func(method, path, body string) {
		req, _ := http.NewRequestWithContext(t.Context(), method, "https://api"+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := rt.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
	}
	send(http.MethodPost, "/api/v1/namespaces/ns/pods/p/binding", `{"metadata":{"name":"p"},"target":{"kind":"Node","name":"n"}}`)
	send(http.MethodPut, "/api/v1/namespaces/ns/pods/p", `{"metadata":{"name":"p","resourceVersion":"7"}}`)
	ws := s.rec.writes("ns", WriteFilter{})
	if len(ws) != 2 || ws[0].Subresource != "binding" || ws[0].Verb != VerbCreate || ws[0].Kind != "Pod" || ws[0].ResourceVersion != "" ||
		ws[1].Verb != VerbUpdate || ws[1].ResourceVersion != "8" || ws[1].UID != "u1" {
		t.Fatalf("writes %+v: want the binding with no resourceVersion, then the update with the new one", ws)
	}
}

// roundTripFunc is an http.RoundTripper made of a function.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// TestCaseArtifactsNamesACaseWithoutATest: a case's directory is named after its spec and namespace, and a
// case made outside a test (no name) after its namespace alone.
func TestCaseArtifactsNamesACaseWithoutATest(t *testing.T) {
	s := &Suite{artifactsDir: "/a"}
	if got := s.caseArtifacts("e-1f", "scenarios a Spec: x"); got != "/a/scenarios-a-spec-x-e-1f" {
		t.Errorf("a spec's directory is %q", got)
	}
	if got := s.caseArtifacts("e-1f", ""); got != "/a/e-1f" {
		t.Errorf("a case without a test has directory %q, want its namespace", got)
	}
}

// TestCaseArtifactsFitsALongSpecInOneName: a spec's name past what a file system takes gives a directory
// name of at most 255 bytes, which can be made, and two long specs that differ only past the cut get two.
func TestCaseArtifactsFitsALongSpecInOneName(t *testing.T) {
	root := t.TempDir()
	s := &Suite{artifactsDir: root}
	long := "scenarios " + strings.Repeat("a shard retiring with its pods asks to be polled, ", 8)
	a, b := s.caseArtifacts("e-1f", long+"one"), s.caseArtifacts("e-1f", long+"two")
	if a == b {
		t.Fatalf("two specs that differ past the cut share the directory %q", a)
	}
	for _, dir := range []string{a, b} {
		if n := len(filepath.Base(dir)); n > 255 {
			t.Errorf("directory name of %d bytes, want at most 255: %q", n, filepath.Base(dir))
		}
		if !strings.HasSuffix(dir, "-e-1f") || !strings.HasPrefix(filepath.Base(dir), "scenarios-a-shard-retiring") {
			t.Errorf("directory %q does not begin with the spec and end with its namespace", dir)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Errorf("the directory cannot be made: %v", err)
		}
	}
}

// TestStopManagersCancelsAllThenWaitsOnce: Stop cancels every manager (last started first) before it waits
// for any, then waits for all against one deadline and names each manager that did not stop by then. The
// managers are bare instances (a cancel func and a done channel), so no control plane is needed.
func TestStopManagersCancelsAllThenWaitsOnce(t *testing.T) {
	const timeout = time.Second
	s := &Suite{managers: map[string]*Manager{}, stopTimeout: timeout}
	var mu sync.Mutex
	var cancelled []string
	release := make(chan struct{}) // the hanging managers return once the test is over
	t.Cleanup(func() { close(release) })
	// add starts a manager named name whose instance returns when the channel returns gives it is closed, and
	// returns the instance's context.
	add := func(name string, returns func(ctx context.Context) <-chan struct{}) context.Context {
		ctx, cancel := context.WithCancel(context.Background())
		m := &Manager{Name: name, done: make(chan error, 1), s: s, stop: func() {
			mu.Lock()
			if ctx.Err() == nil {
				cancelled = append(cancelled, name)
			}
			mu.Unlock()
			cancel()
		}}
		go func() {
			<-returns(ctx)
			m.done <- ctx.Err()
		}()
		s.managers[name] = m
		s.order = append(s.order, name)
		return ctx
	}
	onCancel := func(ctx context.Context) <-chan struct{} { return ctx.Done() }
	never := func(context.Context) <-chan struct{} { return release }
	first := add("first", onCancel)
	add("hangs-1", never)
	add("hangs-2", never)
	// last is stopped first; it returns only once first, stopped last, was cancelled too: waiting for it
	// before cancelling the others would time it out.
	add("last", func(context.Context) <-chan struct{} { return first.Done() })
	add("plain", onCancel)

	begin := time.Now()
	errs := s.stopManagers()
	took := time.Since(begin)

	if want := []string{"plain", "last", "hangs-2", "hangs-1", "first"}; !slices.Equal(cancelled, want) {
		t.Errorf("cancelled %v, want %v (last started first)", cancelled, want)
	}
	var msgs []string
	for _, err := range errs {
		msgs = append(msgs, err.Error())
	}
	if len(msgs) != 2 || !strings.Contains(msgs[0], "manager hangs-2 did not stop within 1s") ||
		!strings.Contains(msgs[1], "manager hangs-1 did not stop within 1s") || strings.Contains(msgs[0], "\n") {
		t.Errorf("errors %q, want one line each for hangs-2 and hangs-1, none for the managers that stopped", msgs)
	}
	// One deadline for all: waiting for each in turn would take a timeout per hanging manager.
	if took >= 2*timeout {
		t.Errorf("stopManagers took %s with two managers hanging, want under %s (one deadline of %s)", took, 2*timeout, timeout)
	}
	if len(s.managers) != 0 {
		t.Errorf("managers left after stop: %v", s.managers)
	}
}

// TestControllerConfigKeepsTheOperatorsChoices: a manager's controller configuration is the operator's, but
// for name validation, always skipped, and the cache sync timeout, bounded by the start timeout.
func TestControllerConfigKeepsTheOperatorsChoices(t *testing.T) {
	start := 60 * time.Second
	for _, tc := range []struct {
		asked, want time.Duration
	}{{0, start}, {5 * time.Minute, start}, {10 * time.Second, 10 * time.Second}} {
		got := controllerConfig(config.Controller{UsePriorityQueue: ptr.To(true), MaxConcurrentReconciles: 3,
			RecoverPanic: ptr.To(false), SkipNameValidation: ptr.To(false), CacheSyncTimeout: tc.asked}, start)
		if !*got.UsePriorityQueue || got.MaxConcurrentReconciles != 3 || *got.RecoverPanic || !*got.SkipNameValidation || got.CacheSyncTimeout != tc.want {
			t.Errorf("controllerConfig with a %s sync timeout = %+v; want the operator's queue, workers and panic choice, name validation skipped, a %s sync timeout", tc.asked, got, tc.want)
		}
	}
}
