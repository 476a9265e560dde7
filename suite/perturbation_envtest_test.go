package suite

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/ensembletest/ensemble/internal/recordtb"
	"github.com/ensembletest/ensemble/suite/mutant"
	"github.com/ensembletest/ensemble/suite/perturb"
)

// testPerturbation checks the write half of perturbation on the marker controller: a fault point refuses
// exactly the write it names (never sent, recorded with its point) and the controller recovers; a restart
// point stops the manager right after the write (the old instance's writes are refused from then on) and a
// fresh instance carries on; an explore record holds the case's writes and end state, and the differential
// oracle fails a case whose end state differs from the record's, naming the field.
func testPerturbation(t *testing.T, s *Suite) {
	seen := func(c *Case, name string) func() string {
		return func() string {
			got := &corev1.ConfigMap{}
			if err := c.Get(name, got); err != nil {
				return err.Error()
			}
			return got.Data["seen"]
		}
	}
	// createSeen creates ConfigMap name in the case and waits until the marker has marked it and its write
	// is recorded: the marker's change can reach a reader before the write is recorded (the recorder adds a
	// write when the call returns), and a test that then reads Writes must find it.
	createSeen := func(t *testing.T, c *Case, name string) {
		t.Helper()
		if err := c.Create(cm(name, false)); err != nil {
			t.Fatal(err)
		}
		NewWithT(t).Eventually(seen(c, name)).WithTimeout(patience).Should(Equal("yes"))
		NewWithT(t).Eventually(func() bool {
			return slices.ContainsFunc(c.Writes(WriteFilter{Manager: "op", Name: name}), func(w Write) bool { return w.Err == nil })
		}).WithTimeout(patience).Should(BeTrue(), "the marker's accepted write of %s was not recorded", name)
	}
	t.Run("conflict on the first write", func(t *testing.T) {
		c := s.NewCase(t)
		c.Perturb(perturb.Point{Mode: perturb.Conflict, Writer: "op/configmap", Object: "ConfigMap/m", Trigger: perturb.Nth(1)})
		createSeen(t, c, "m")
		ws := c.Writes(WriteFilter{Manager: "op", IncludeRejected: true})
		if len(ws) < 2 || !apierrors.IsConflict(ws[0].Err) || ws[0].Point != "conflict@op/configmap:ConfigMap/m#1" || ws[1].Err != nil || ws[1].Point != "" {
			t.Fatalf("writes %v: want the first refused with a conflict by the point, the retry through", ws)
		}
		if !strings.Contains(ws[0].Err.Error(), "injected by point conflict@op/configmap:ConfigMap/m#1") {
			t.Fatalf("the injected error does not name its point: %v", ws[0].Err)
		}
	})
	t.Run("a point on an object by its place", func(t *testing.T) {
		// The marker's second ConfigMap, whatever its name: the point counts the writes on it alone.
		c := s.NewCase(t)
		const point = "conflict@op/configmap:ConfigMap/*2#1"
		p, err := perturb.Parse(point)
		if err != nil {
			t.Fatal(err)
		}
		c.Perturb(p)
		createSeen(t, c, "one")
		createSeen(t, c, "two")
		ws := c.Writes(WriteFilter{Manager: "op", Controller: "configmap", IncludeRejected: true})
		var refused []string
		for _, w := range ws {
			if w.Point != "" {
				refused = append(refused, w.Name)
			}
		}
		i := slices.IndexFunc(ws, func(w Write) bool { return w.Name == "two" })
		if len(refused) != 1 || i < 0 || ws[i].Point != point || !apierrors.IsConflict(ws[i].Err) {
			t.Fatalf("writes %v: want the marker's first write on its second ConfigMap, two, refused by the point, and no other", ws)
		}
	})
	t.Run("restart after the first write", func(t *testing.T) {
		c := s.NewCase(t)
		s.mu.Lock()
		old := s.managers["op"]
		s.mu.Unlock()
		c.Perturb(perturb.Point{Mode: perturb.Restart, Writer: "op/configmap", Trigger: perturb.Nth(1)})
		createSeen(t, c, "a")
		NewWithT(t).Eventually(func() *Manager {
			s.mu.Lock()
			defer s.mu.Unlock()
			return s.managers["op"]
		}).WithTimeout(patience).ShouldNot(Or(BeNil(), BeIdenticalTo(old)))
		if old.wm.fence.Load() == nil {
			t.Fatal("the stopped instance is not fenced")
		}
		late := cm("late", false)
		late.Namespace = c.Namespace
		if err := old.wm.GetClient().Create(t.Context(), late); err == nil || !strings.Contains(err.Error(), "was stopped by point restart@op/configmap#1") {
			t.Fatalf("a write of the stopped instance: %v, want it refused naming the point", err)
		}
		// The fresh instance reconciles what comes next.
		createSeen(t, c, "b")
	})
	t.Run("stale view until one more write", func(t *testing.T) {
		c := s.NewCase(t)
		c.Perturb(perturb.Point{Mode: perturb.Stale, Writer: "op/configmap", Object: "ConfigMap/s", Trigger: perturb.Nth(1), For: 1})
		createSeen(t, c, "s")
		cached := cachedSeen(t, s, c, "s")
		// The hold began before the marker's write was sent and lasts one more write in the namespace.
		if got := cached(); got != "" {
			t.Fatalf("the manager's cache reads seen=%q during the hold, want the object as it was before the write", got)
		}
		if err := c.Create(cm("other", false)); err != nil {
			t.Fatal(err)
		}
		NewWithT(t).Eventually(cached).WithTimeout(patience).Should(Equal("yes"))
	})
	t.Run("a stale point lags the kind's whole stream in resourceVersion order", func(t *testing.T) {
		// A slow watch delivers every object's events late and in resourceVersion order: holding the
		// marker's write of first must hold second's later creation too, or op would learn of second
		// (and mark it) before it learns that first was marked.
		c := s.NewCase(t)
		delivered := opDeliveries(t, s, c, "first", "second")
		const lag = 2 * time.Second
		c.Perturb(perturb.Point{Mode: perturb.Stale, Writer: "op/configmap", Object: "ConfigMap/first", Trigger: perturb.Nth(1), Lag: lag})
		createSeen(t, c, "first")
		if err := c.Create(cm("second", false)); err != nil {
			t.Fatal(err)
		}
		NewWithT(t).Eventually(cachedSeen(t, s, c, "second")).WithTimeout(patience + lag).Should(Equal("yes"))
		NewWithT(t).Eventually(cachedSeen(t, s, c, "first")).WithTimeout(patience).Should(Equal("yes"))
		got := delivered()
		last := 0
		for _, d := range got {
			if d.rv < last {
				t.Fatalf("op's informer delivered %v: resourceVersion %d after %d", got, d.rv, last)
			}
			last = d.rv
		}
		marked := slices.IndexFunc(got, func(d delivery) bool { return d.name == "first" && d.seen })
		created := slices.IndexFunc(got, func(d delivery) bool { return d.name == "second" })
		if marked < 0 || created < 0 || marked > created {
			t.Fatalf("op's informer delivered %v: want the marker's write of first before second's creation", got)
		}
	})
	t.Run("a quiescence check ends a hold that lasts until quiet", func(t *testing.T) {
		c := s.NewCase(t)
		c.Perturb(perturb.Point{Mode: perturb.Stale, Writer: "op/configmap", Object: "ConfigMap/q", Trigger: perturb.Nth(1)})
		createSeen(t, c, "q")
		// A window shorter than the hold's own 300 ms of quiet: without the release the check would return
		// while op's cache still lacks the marker's write.
		c.RequireQuiescent(100*time.Millisecond, patience)
		if got := cachedSeen(t, s, c, "q")(); got != "yes" {
			t.Fatalf("after RequireQuiescent op's cache reads seen=%q: the hold outlived the spec's quiescence check", got)
		}
	})
	t.Run("a lag holds through a quiet namespace and a quiescence check waits for it", func(t *testing.T) {
		c := s.NewCase(t)
		// Longer than the most a hold that lasts until quiet can last, so only the lag explains a cache
		// still stale after it.
		lag := quietReleaseMax + time.Second
		c.Perturb(perturb.Point{Mode: perturb.Stale, Writer: "op/configmap", Object: "ConfigMap/l", Trigger: perturb.Nth(1), Lag: lag})
		began := time.Now()
		createSeen(t, c, "l")
		c.RequireQuiescent(100*time.Millisecond, patience)
		if waited := time.Since(began); waited < lag {
			t.Fatalf("RequireQuiescent returned %s after the point could fire, before its %s lag ended", waited, lag)
		}
		if got := cachedSeen(t, s, c, "l")(); got != "yes" {
			t.Fatalf("after the lag op's cache reads seen=%q, want the marker's write", got)
		}
	})
	t.Run("Release ends a lag early", func(t *testing.T) {
		c := s.NewCase(t)
		c.Perturb(perturb.Point{Mode: perturb.Stale, Writer: "op/configmap", Object: "ConfigMap/r", Trigger: perturb.Nth(1), Lag: time.Hour})
		createSeen(t, c, "r")
		cached := cachedSeen(t, s, c, "r")
		if got := cached(); got != "" {
			t.Fatalf("op's cache reads seen=%q during the lag, want the object as it was before the write", got)
		}
		c.Release()
		NewWithT(t).Eventually(cached).WithTimeout(patience).Should(Equal("yes"))
	})
	t.Run("run points skip a case outside a spec", func(t *testing.T) {
		s.runs = [][]perturb.Point{{{Mode: perturb.Conflict, Writer: "op", Trigger: perturb.Nth(1)}}}
		defer func() { s.runs = [][]perturb.Point{nil} }()
		for name, want := range map[string]bool{"": false, "a spec": true} {
			p := &recordtb.TB{TestName: name}
			c := s.NewCase(p)
			if got := s.planFor(c.Namespace, false) != nil; got != want {
				t.Errorf("case of test %q has a plan: %v, want %v", name, got, want)
			}
			p.RunCleanups()
		}
	})
	t.Run("a writer that names nothing fails the case", func(t *testing.T) {
		// As ENSEMBLE_PERTURB sets them: a typo of the manager fails the case naming the writers there are; a
		// real writer whose point did not fire is only reported.
		s.runs = [][]perturb.Point{{{Mode: perturb.Conflict, Writer: "opp", Trigger: perturb.Nth(1)},
			{Mode: perturb.Conflict, Writer: "op/looper", Object: "ConfigMap/none", Trigger: perturb.Nth(1)}}}
		defer func() { s.runs = [][]perturb.Point{nil} }()
		p := &recordtb.TB{TestName: "writer typo"}
		c := s.NewCase(p)
		createSeen(t, c, "m")
		p.RunCleanups()
		msg := strings.Join(p.Errors(), "\n")
		want := `suite: point conflict@opp#1 names writer "opp", which is no manager, controller or writer of this suite: name one of `
		if !strings.Contains(msg, want) || !strings.Contains(msg, "op, op/clientset-writer, op/clusterrole, op/configmap, op/looper") || strings.Contains(msg, `"op/looper"`) {
			t.Fatalf("cleanup errors %q, want one line for opp naming op, op/clientset-writer, op/clusterrole, op/configmap and op/looper, none for op/looper", p.Errors())
		}
		t.Log(msg)
		if r := strings.Join(p.Reports(), "\n"); !strings.Contains(r, "conflict@op/looper:ConfigMap/none#1 never fired") {
			t.Fatalf("reports %q, want the real writer's point reported as never fired", p.Reports())
		}
	})
	t.Run("change triggers", func(t *testing.T) {
		c := s.NewCase(t)
		// The case's creation of cc is its first change: the marker's next write is refused.
		c.Perturb(perturb.Point{Mode: perturb.Conflict, Writer: "op/configmap", Object: "ConfigMap/cc", Trigger: perturb.Change(1)})
		// The marker's write of cs is its second change: op's cache holds it until one more write.
		c.Perturb(perturb.Point{Mode: perturb.Stale, Writer: "op", Object: "ConfigMap/cs", Trigger: perturb.Change(2), For: 1})
		createSeen(t, c, "cc")
		ws := c.Writes(WriteFilter{Manager: "op", Name: "cc", IncludeRejected: true})
		if len(ws) < 2 || !apierrors.IsConflict(ws[0].Err) || ws[0].Point != "conflict@op/configmap:ConfigMap/cc^1" {
			t.Fatalf("writes %v: want the marker's first write after cc's creation refused by the change point, the retry through", ws)
		}
		cached := cachedSeen(t, s, c, "cs")
		createSeen(t, c, "cs")
		NewWithT(t).Eventually(cached).WithTimeout(patience).Should(Equal(""), "op's cache has cs, without the marker's write")
		if got := cached(); got != "" {
			t.Fatalf("op's cache reads seen=%q, want the marker's write (cs's second change) held", got)
		}
		if err := c.Create(cm("after", false)); err != nil {
			t.Fatal(err)
		}
		NewWithT(t).Eventually(cached).WithTimeout(patience).Should(Equal("yes"))
		points, firedAt, errs := c.endPerturbation()
		if len(points) != 2 || len(errs) != 0 || !slices.ContainsFunc(firedAt, func(f string) bool {
			return strings.HasPrefix(f, "stale@op:ConfigMap/cs^2+1 at ConfigMap/cs (its change 2")
		}) {
			t.Fatalf("points %v fired %v errors %v", points, firedAt, errs)
		}
	})
	t.Run("restart on a change", func(t *testing.T) {
		c := s.NewCase(t)
		s.mu.Lock()
		old := s.managers["op"]
		s.mu.Unlock()
		c.Perturb(perturb.Point{Mode: perturb.Restart, Writer: "op", Object: "ConfigMap/cr", Trigger: perturb.Change(1)})
		if err := c.Create(cm("cr", false)); err != nil {
			t.Fatal(err)
		}
		NewWithT(t).Eventually(func() *Manager {
			s.mu.Lock()
			defer s.mu.Unlock()
			return s.managers["op"]
		}).WithTimeout(patience).ShouldNot(Or(BeNil(), BeIdenticalTo(old)))
		if f := old.wm.fence.Load(); f == nil || f.String() != "restart@op:ConfigMap/cr^1" {
			t.Fatalf("the stopped instance's fence is %v, want the change point", f)
		}
		NewWithT(t).Eventually(seen(c, "cr")).WithTimeout(patience).Should(Equal("yes"))
	})
	t.Run("the handle follows a restart", func(t *testing.T) {
		c := s.NewCase(t, Unadmitted())
		// Each instance's Register context, in the order the instances started.
		var ctxMu sync.Mutex
		var ctxs []context.Context
		registered := func() []context.Context {
			ctxMu.Lock()
			defer ctxMu.Unlock()
			return slices.Clone(ctxs)
		}
		m, err := s.StartManager(ManagerOptions{Name: "own", Ungated: true,
			Cache: cache.Options{DefaultNamespaces: map[string]cache.Config{c.Namespace: {}}},
			Register: func(ctx context.Context, mgr manager.Manager) error {
				ctxMu.Lock()
				ctxs = append(ctxs, ctx)
				ctxMu.Unlock()
				return (&marker{Client: mgr.GetClient()}).SetupWithManager(mgr)
			}})
		if err != nil {
			t.Fatal(err)
		}
		c.AfterCleanup(func() { _ = m.Stop() })
		c.Perturb(perturb.Point{Mode: perturb.Restart, Writer: "own", Trigger: perturb.Nth(1)})
		if err := c.Create(cm("h", false)); err != nil {
			t.Fatal(err)
		}
		current := func() *Manager {
			s.mu.Lock()
			defer s.mu.Unlock()
			return s.managers["own"]
		}
		NewWithT(t).Eventually(current).WithTimeout(patience).ShouldNot(Or(BeNil(), BeIdenticalTo(m)))
		// Ending the case's points waits for the restart, and a restart ends once the fresh instance's
		// controllers run: the verdicts that follow see it reconcile.
		if _, _, errs := c.endPerturbation(); len(errs) != 0 {
			t.Fatal(errs)
		}
		select {
		case <-current().wm.workersRunning():
		default:
			t.Fatal("the restart was over before the fresh instance's controllers ran their workers")
		}
		<-m.Elected()
		// Register's context ends with its instance: the stopped one's is cancelled, the fresh one's is not.
		if got := registered(); len(got) != 2 || got[0].Err() == nil || got[1].Err() != nil {
			t.Fatalf("after a restart, %d Register contexts; want 2, the first cancelled with its instance and the second live", len(got))
		}
		// The spec's handle is the one it started; stopping it stops the instance the restart made.
		if err := m.Stop(); err != nil {
			t.Fatal(err)
		}
		if cur := current(); cur != nil {
			t.Fatalf("after Stop on the original handle, manager %q still runs (the restarted instance)", cur.Name)
		}
		if err := registered()[1].Err(); err == nil {
			t.Fatal("the restarted instance stopped, but the context its Register got was not cancelled")
		}
	})
	t.Run("record and differential oracle", func(t *testing.T) {
		dir := t.TempDir()
		s.exploreDir = dir
		defer func() { s.exploreDir, s.baselines = "", nil }()
		run := func(value string) *recordtb.TB {
			p := &recordtb.TB{TestName: "differential"}
			c := s.NewCase(p)
			o := cm("x", false)
			o.Data = map[string]string{"k": value}
			if err := c.Create(o); err != nil {
				t.Fatal(err)
			}
			NewWithT(t).Eventually(seen(c, "x")).WithTimeout(patience).Should(Equal("yes"))
			p.RunCleanups()
			return p
		}
		if p := run("v"); p.Failed() {
			t.Fatalf("the unperturbed case failed: %v", p.Errors())
		}
		r, b := onlyRecord(t, dir)
		var first perturb.RecordWrite
		if len(r.Writes) > 0 {
			first = r.Writes[0]
			first.At = time.Time{} // when it returned, which no run repeats
		}
		if r.Spec != "differential" || r.SpecFailed || r.EndState["ConfigMap/x"]["data.k"] != "v" || r.EndState["ConfigMap/x"]["data.seen"] != "yes" ||
			first != (perturb.RecordWrite{Writer: "op/configmap", Object: "ConfigMap/x", Verb: "patch"}) ||
			r.Changes["ConfigMap/x"] != 2 || r.Seen["op"]["ConfigMap/x"] != 2 {
			t.Fatalf("record %s", b)
		}
		s.exploreDir = ""
		s.baselines = map[string][]map[string]map[string]string{"differential": {r.EndState}}
		p := run("w")
		if !p.Failed() || !strings.Contains(strings.Join(p.Errors(), "\n"), "oracle differential: the end state differs from the unperturbed run's in 1 fields:\n    ConfigMap/x data.k: v -> w") {
			t.Fatalf("cleanup errors %q, want the differential oracle to name data.k", p.Errors())
		}
		if p := run("v"); p.Failed() {
			t.Fatalf("a case equal to its baseline failed: %v", p.Errors())
		}
		p = &recordtb.TB{TestName: "differential"}
		c0 := s.NewCase(p)
		c0.OptOut(Convergence, "the test ends before its operator settles on purpose")
		o0 := cm("x", false)
		o0.Data = map[string]string{"k": "w"}
		if err := c0.Create(o0); err != nil {
			t.Fatal(err)
		}
		NewWithT(t).Eventually(seen(c0, "x")).WithTimeout(patience).Should(Equal("yes"))
		p.RunCleanups()
		if p.Failed() || !strings.Contains(strings.Join(p.Reports(), "\n"), "not judged: the case opted out of convergence") {
			t.Fatalf("a case that opted out of Convergence: errors %q reports %q, want no differential verdict and a report saying so", p.Errors(), p.Reports())
		}
		p = &recordtb.TB{TestName: "differential"}
		c := s.NewCase(p)
		c.AllowDifference(Objects{Kind: "ConfigMap", Name: "x"}, "data", "the test writes another value on purpose")
		o := cm("x", false)
		o.Data = map[string]string{"k": "w"}
		if err := c.Create(o); err != nil {
			t.Fatal(err)
		}
		NewWithT(t).Eventually(seen(c, "x")).WithTimeout(patience).Should(Equal("yes"))
		p.RunCleanups()
		if p.Failed() || len(p.Reports()) != 1 || !strings.Contains(p.Reports()[0], "the test writes another value on purpose") {
			t.Fatalf("an allowed difference: errors %q reports %q, want no failure and the reason reported", p.Errors(), p.Reports())
		}
		// A spec that failed on its own: the convergence oracle did not wait, so the differential oracle says
		// the end state it compared may not have settled, and the record says the spec failed first.
		s.exploreDir = t.TempDir()
		p = &recordtb.TB{TestName: "differential"}
		c1 := s.NewCase(p)
		o1 := cm("x", false)
		o1.Data = map[string]string{"k": "w"}
		if err := c1.Create(o1); err != nil {
			t.Fatal(err)
		}
		NewWithT(t).Eventually(seen(c1, "x")).WithTimeout(patience).Should(Equal("yes"))
		p.Errorf("the spec's own assertion")
		p.RunCleanups()
		want := "oracle differential: the spec failed before its end state settled; the end state differs from the unperturbed run's in 1 fields:\n    ConfigMap/x data.k: v -> w"
		if !strings.Contains(strings.Join(p.Errors(), "\n"), want) {
			t.Fatalf("a spec that failed first: cleanup errors %q, want %q", p.Errors(), want)
		}
		if r, b := onlyRecord(t, s.exploreDir); !r.SpecFailed || !r.Failed {
			t.Fatalf("a spec that failed first: record %s, want specFailed", b)
		}
	})
}

// onlyRecord reads the one case record in dir (ENSEMBLE_EXPLORE's), and its JSON; it fails t when dir
// holds another count of records or one that does not parse.
func onlyRecord(t *testing.T, dir string) (perturb.Record, []byte) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	if len(files) != 1 {
		t.Fatalf("records %v, want one", files)
	}
	b, _ := os.ReadFile(files[0])
	var r perturb.Record
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r, b
}

// delivery is one event op's ConfigMap informer handed its handlers: the object's name, resourceVersion and
// whether data.seen was set.
type delivery struct {
	name string
	rv   int
	seen bool
}

// opDeliveries records the events op's ConfigMap informer hands its handlers for the case's ConfigMaps
// names, in the order handed, until the test ends; the func returns them so far.
func opDeliveries(t *testing.T, s *Suite, c *Case, names ...string) func() []delivery {
	t.Helper()
	s.mu.Lock()
	m := s.managers["op"]
	s.mu.Unlock()
	inf, err := m.mgr.GetCache().GetInformer(t.Context(), &corev1.ConfigMap{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []delivery
	add := func(o any) {
		cm, ok := o.(*corev1.ConfigMap)
		if !ok || cm.Namespace != c.Namespace || !slices.Contains(names, cm.Name) {
			return
		}
		rv, err := strconv.Atoi(cm.ResourceVersion)
		if err != nil {
			t.Errorf("ConfigMap %s: resourceVersion %q", cm.Name, cm.ResourceVersion)
		}
		mu.Lock()
		got = append(got, delivery{cm.Name, rv, cm.Data["seen"] == "yes"})
		mu.Unlock()
	}
	reg, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: add, UpdateFunc: func(_, o any) { add(o) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = inf.RemoveEventHandler(reg) })
	return func() []delivery {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got)
	}
}

// cachedSeen reads data.seen of the case's ConfigMap name from the op manager's cache (the error's text when
// it has none).
func cachedSeen(t *testing.T, s *Suite, c *Case, name string) func() string {
	s.mu.Lock()
	m := s.managers["op"]
	s.mu.Unlock()
	return func() string {
		got := &corev1.ConfigMap{}
		if err := m.mgr.GetCache().Get(t.Context(), client.ObjectKey{Namespace: c.Namespace, Name: name}, got); err != nil {
			return err.Error()
		}
		return got.Data["seen"]
	}
}

// testRuns checks ENSEMBLE_PERTURB's runs: each run of a spec gets its own points and fresh manager
// instances, a run past the sequence fails, and a run that left something behind fails the next one.
func testRuns(t *testing.T, s *Suite) {
	conflict := perturb.Point{Mode: perturb.Conflict, Writer: "op", Trigger: perturb.Nth(1)}
	timeout := perturb.Point{Mode: perturb.Timeout, Writer: "op", Trigger: perturb.Nth(2)}
	defer func() { s.runs = [][]perturb.Point{nil} }()
	armed := func(ns string) []string {
		pl := s.planFor(ns, false)
		if pl == nil {
			return nil
		}
		pl.mu.Lock()
		defer pl.mu.Unlock()
		var out []string
		for _, a := range pl.armed {
			out = append(out, a.p.String())
		}
		return out
	}
	running := func() *Manager {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.managers["op"]
	}

	t.Run("each run its points and fresh managers", func(t *testing.T) {
		s.runs = [][]perturb.Point{{conflict}, {timeout}}
		p := &recordtb.TB{TestName: "two runs", Ginkgo: true}
		first := running()
		for run, want := range []string{conflict.String(), timeout.String()} {
			p.Run(func() {
				c := s.NewCase(p)
				c.OptOut(Convergence, "the runs' bookkeeping is under test, not an operator")
				if got := armed(c.Namespace); !slices.Equal(got, []string{want}) {
					t.Errorf("run %d armed %v, want [%s]", run+1, got, want)
				}
			})
			p.RunCleanups()
		}
		if fresh := running(); fresh == first || fresh == nil {
			t.Errorf("manager op is the same instance in run 2 as in run 1 (%p), want a fresh one", first)
		}
		if msg := strings.Join(append(p.Fatals(), p.Errors()...), "\n"); msg != "" {
			t.Fatalf("two runs of two: %s", msg)
		}
		p.Run(func() { s.NewCase(p) })
		p.RunCleanups()
		if got := strings.Join(p.Fatals(), "\n"); !strings.Contains(got, "gives 2 runs") {
			t.Errorf("a third run of a sequence of two failed with %q, want one that says it gives 2 runs", got)
		}
	})

	t.Run("what the namespace controller deletes after the cleanup is no leftover", func(t *testing.T) {
		p := &recordtb.TB{TestName: "a late object", Ginkgo: true}
		var late []string
		p.Run(func() {
			c := s.NewCase(p)
			c.OptOut(Convergence, "the runs' bookkeeping is under test, not an operator")
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: "late"}}
			if err := s.Client.Create(t.Context(), cm); err != nil {
				t.Errorf("creating ConfigMap/late: %v", err)
				return
			}
			// What a controller's create just after the cleanup emptied the namespace leaves: an object in a
			// namespace handed to the namespace controller.
			s.deleteNamespace(c.Namespace, p.Name())
			for _, o := range c.settledLeftovers() {
				late = append(late, o.GetName())
			}
		})
		p.RunCleanups()
		if len(late) > 0 {
			t.Errorf("leftovers %v in a namespace the namespace controller deletes, want none once it has", late)
		}
		if msg := strings.Join(append(p.Fatals(), p.Errors()...), "\n"); msg != "" {
			t.Errorf("the case: %s", msg)
		}
	})

	t.Run("each run its mutant", func(t *testing.T) {
		// make mutate's runs: ENSEMBLE_MUTANTS alone asks for them, and each makes its mutant active.
		t.Setenv(mutant.Env, "7|9")
		defer mutant.Activate(0)
		if n := Runs(); n != 2 {
			t.Fatalf("Runs() is %d under %s=7|9, want 2", n, mutant.Env)
		}
		if err := s.perturbationEnv(); err != nil || len(s.runs) != 2 {
			t.Fatalf("%s=7|9 gives %d runs (%v), want 2", mutant.Env, len(s.runs), err)
		}
		mutant.Activate(7) // as the package's init does for run 1
		p := &recordtb.TB{TestName: "two mutants", Ginkgo: true}
		first := running()
		for run, want := range []int{7, 9} {
			p.Run(func() {
				c := s.NewCase(p)
				c.OptOut(Convergence, "the runs' bookkeeping is under test, not an operator")
				if got := mutant.Active(); got != want {
					t.Errorf("run %d: mutant %d active, want %d", run+1, got, want)
				}
			})
			p.RunCleanups()
		}
		second := running()
		if second == first || second == nil {
			t.Errorf("manager op is the same instance in run 2 as in run 1 (%p), want a fresh one", first)
		}
		if msg := strings.Join(append(p.Fatals(), p.Errors()...), "\n"); msg != "" {
			t.Fatalf("two mutants: %s", msg)
		}
		// The first run of the next spec is mutant 7's again, on fresh instances.
		q := &recordtb.TB{TestName: "two mutants, another spec", Ginkgo: true}
		q.Run(func() {
			c := s.NewCase(q)
			c.OptOut(Convergence, "the runs' bookkeeping is under test, not an operator")
			if got := mutant.Active(); got != 7 {
				t.Errorf("run 1 of the next spec: mutant %d active, want 7", got)
			}
		})
		q.RunCleanups()
		if third := running(); third == second || third == nil {
			t.Errorf("manager op is the same instance in the next spec's run 1 as in the last run (%p), want a fresh one", second)
		}
		if msg := strings.Join(append(q.Fatals(), q.Errors()...), "\n"); msg != "" {
			t.Fatalf("the next spec: %s", msg)
		}
		t.Setenv("ENSEMBLE_PERTURB", "|||")
		if err := s.perturbationEnv(); err == nil || !strings.Contains(err.Error(), "ENSEMBLE_PERTURB gives 4 runs and ENSEMBLE_MUTANTS 2") {
			t.Errorf("4 runs of points and 2 of mutants: %v, want an error naming both counts", err)
		}
		t.Setenv("ENSEMBLE_PERTURB", "")
		if err := s.perturbationEnv(); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("flake attempts: every run goes on to the next", func(t *testing.T) {
		// make mutate's flake attempts: a run that passed fails on purpose, and a run whose mutant failed
		// earlier fails at once, so that Ginkgo goes on to every run.
		t.Setenv(mutant.Env, "7|9|7")
		t.Setenv(mutant.RetryEnv, "1")
		defer mutant.Activate(0)
		if n := Runs(); n != 1 {
			t.Fatalf("Runs() is %d under %s, want 1 (the runs are flake attempts)", n, mutant.RetryEnv)
		}
		if err := s.perturbationEnv(); err != nil || len(s.runs) != 3 {
			t.Fatalf("%s=7|9|7 gives %d runs (%v), want 3", mutant.Env, len(s.runs), err)
		}
		var got []string
		for run := 1; run <= 3; run++ {
			p := &recordtb.TB{TestName: "retried mutants", Ginkgo: true}
			p.Run(func() {
				c := s.NewCase(p)
				c.OptOut(Convergence, "the runs' bookkeeping is under test, not an operator")
				if run == 1 {
					p.Errorf("mutant 7 fails the spec")
				}
			})
			p.RunCleanups()
			got = append(got, strings.Join(append(p.Fatals(), p.Errors()...), "; "))
		}
		for k, want := range []string{"mutant 7 fails the spec", mutant.ErrPassed.Error(), mutant.ErrDone.Error()} {
			if !strings.Contains(got[k], want) || (k > 0 && strings.Count(got[k], "ensemble mutant:") != 1) {
				t.Errorf("run %d failed with %q, want only %q", k+1, got[k], want)
			}
		}
	})

	t.Run("a run's leftovers fail the next run", func(t *testing.T) {
		s.runs = [][]perturb.Point{nil, nil}
		p := &recordtb.TB{TestName: "leaky runs", Ginkgo: true}
		var ns string
		p.Run(func() {
			c := s.NewCase(p)
			c.OptOut(Convergence, "the runs' bookkeeping is under test, not an operator")
			ns = c.Namespace
		})
		p.RunCleanups()
		if msg := strings.Join(append(p.Fatals(), p.Errors()...), "\n"); msg != "" {
			t.Fatalf("run 1: %s", msg)
		}
		// What a harness bug could leave behind: a plan, an admission, a held watch, a goroutine.
		s.arm(s.planFor(ns, true), conflict)
		s.gate.admit(ns)
		release := running().holds.hold(configMapKind, ns, false)
		block := make(chan struct{})
		goCase(ns, func() { <-block })
		defer func() {
			close(block)
			release()
			s.gate.close(ns)
			s.pmu.Lock()
			delete(s.plans, ns)
			s.pmu.Unlock()
		}()
		p.Run(func() { s.NewCase(p) })
		p.RunCleanups()
		got := strings.Join(p.Fatals(), "\n")
		for _, want := range []string{"run 2 of \"leaky runs\" cannot begin", "plan of namespace " + ns + " is still armed",
			"namespace " + ns + " is still admitted", "holds back its ConfigMap watch for a point of namespace " + ns,
			"1 goroutines the harness started for namespace " + ns} {
			if !strings.Contains(got, want) {
				t.Errorf("run 2 failed with %q, want it to say %q", got, want)
			}
		}
	})
}
