package suite

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ensembletest/ensemble/internal/recordtb"
)

// cm is a ConfigMap named name, looping (the looper bumps it forever) when loop is true.
func cm(name string, loop bool) *corev1.ConfigMap {
	o := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if loop {
		o.Labels = map[string]string{"loop": "true"}
	}
	return o
}

// marked permits a ConfigMap's creation and marker's data.seen after it.
func marked(name string) Permit {
	return Before(Permits(Added, "ConfigMap", name), Permits(Modified, "ConfigMap", name, "data.seen"))
}

// testScripts checks a script's verdicts both ways: a healthy sequence passes, and one extra change, a
// wrong order, an unfinished script and a dropped step error each fail with a line that says so.
func testScripts(t *testing.T, s *Suite) {
	t.Run("healthy", func(t *testing.T) {
		c := s.NewCase(t)
		sc := c.Script("two maps")
		sc.RequireStep("create a", func() error { return c.Create(cm("a", false)) }, marked("a"))
		sc.RequireStep("create b", func() error { return c.Create(cm("b", false)) }, marked("b"))
		sc.RequireStep("delete a", func() error { return c.Delete(cm("a", false)) }, Permits(Deleted, "ConfigMap", "a"))
		sc.RequireFinish(time.Second)
	})
	probe := func(t *testing.T, name string, body func(c *Case, sc *Script) error) (*recordtb.TB, error) {
		p := &recordtb.TB{TestName: name}
		c := s.NewCase(p)
		err := body(c, c.Script(name))
		p.RunCleanups()
		return p, err
	}
	t.Run("one extra change", func(t *testing.T) {
		p, err := probe(t, "extra", func(c *Case, sc *Script) error {
			return sc.Step("create a and b", func() error {
				if err := c.Create(cm("a", false)); err != nil {
					return err
				}
				return c.Create(cm("b", false))
			}, marked("a"))
		})
		if err == nil || !regexp.MustCompile(`a change no permit covers: #\d+ \S+ Added ConfigMap/e-extra-[0-9a-f]+/b `).MatchString(err.Error()) {
			t.Fatalf("step error %v, want the unpermitted creation of b named", err)
		}
		if !strings.Contains(strings.Join(p.Errors(), "\n"), "was dropped") {
			t.Fatalf("cleanup errors %q: the step's error was dropped and cleanup did not say so", p.Errors())
		}
	})
	t.Run("wrong order", func(t *testing.T) {
		_, err := probe(t, "order", func(c *Case, sc *Script) error {
			err := sc.Step("a then b", func() error {
				if err := c.Create(cm("a", false)); err != nil {
					return err
				}
				return c.Create(cm("b", false))
			}, Before(marked("b"), marked("a")))
			c.KnownDefect("X-1", func() error { return err })
			return err
		})
		if err == nil || !strings.Contains(err.Error(), "order violated") || !strings.Contains(err.Error(), "Added ConfigMap/b must come before Added ConfigMap/a") {
			t.Fatalf("step error %v, want the order violation named", err)
		}
	})
	t.Run("unfinished", func(t *testing.T) {
		p, err := probe(t, "unfinished", func(c *Case, sc *Script) error {
			return sc.Step("create a", func() error { return c.Create(cm("a", false)) }, marked("a"))
		})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(strings.Join(p.Errors(), "\n"), `script "unfinished" was never finished`) {
			t.Fatalf("cleanup errors %q, want the unfinished script named", p.Errors())
		}
	})
	t.Run("a kind the stream does not watch", func(t *testing.T) {
		p, err := probe(t, "unwatched", func(c *Case, sc *Script) error {
			return sc.Step("create a secret", nil, Permits(Added, "Secret", "s"))
		})
		if err != nil || len(p.Fatals()) != 1 || !strings.Contains(p.Fatals()[0], `kind "Secret" is not watched`) || strings.Contains(strings.Join(p.Errors(), "\n"), "never finished") {
			t.Fatalf("step error %v, fatals %q, errors %q: want one fatal naming the unwatched kind and no unfinished-script complaint", err, p.Fatals(), p.Errors())
		}
	})
	t.Run("a change made before the script", func(t *testing.T) {
		// A write that returned before Script was called is outside the script even when the event stream
		// delivers it after the call: each round updates pre and starts a script at once whose step permits
		// only another object's changes.
		c := s.NewCase(t)
		setup := c.Script("setup")
		setup.RequireStep("create pre", func() error { return c.Create(cm("pre", false)) }, marked("pre"))
		setup.RequireFinish(0)
		const rounds = 20
		var judged []string
		for i := range rounds {
			pre := &corev1.ConfigMap{}
			if err := c.Update("pre", pre, func() { pre.Data["round"] = strconv.Itoa(i) }); err != nil {
				t.Fatal(err)
			}
			name := "a-" + strconv.Itoa(i)
			sc := c.Script("round " + strconv.Itoa(i))
			err := sc.Step("create "+name, func() error { return c.Create(cm(name, false)) }, marked(name))
			if err != nil {
				judged = append(judged, err.Error())
				continue
			}
			sc.RequireFinish(0)
		}
		if len(judged) > 0 {
			t.Fatalf("%d of %d scripts judged a change made before they began, e.g.:\n%s", len(judged), rounds, judged[0])
		}
	})
	t.Run("a change after the last step", func(t *testing.T) {
		_, err := probe(t, "late", func(c *Case, sc *Script) error {
			if err := sc.Step("create a", func() error { return c.Create(cm("a", false)) }, marked("a")); err != nil {
				return err
			}
			if err := c.Create(cm("late", false)); err != nil {
				return err
			}
			err := sc.Finish(time.Second)
			c.KnownDefect("X-1", func() error { return err })
			return err
		})
		if err == nil || !strings.Contains(err.Error(), "no step permits it") {
			t.Fatalf("Finish error %v, want the late change named", err)
		}
	})
}

// testOracles checks each oracle both ways: the wrapped-controller and script cases above are the healthy
// specs (they pass every oracle); here each oracle fails on its bad case, and a 10 writes/s loop is
// flagged (the time it took is logged).
func testOracles(t *testing.T, s *Suite) {
	probe := func(name string, body func(c *Case)) *recordtb.TB {
		p := &recordtb.TB{TestName: name}
		c := s.NewCase(p)
		body(c)
		p.RunCleanups()
		return p
	}
	t.Run("hot loop of a writer at 20 writes/s", func(t *testing.T) {
		// The threshold itself (10 writes/s for 1.5 s) is TestHotLoopThreshold's, over recorded times. Here a
		// writer aims at twice the rate and writes until it is flagged: a loaded machine's round trips slow it,
		// and it reaches the rate in some 1.5 s sooner or later.
		var flagged time.Duration
		var writes int
		p := probe("ticker", func(c *Case) {
			c.OptOut(Convergence, "the ticker writes until the spec ends")
			w, err := s.recordedClient(writer{manager: "ticker"})
			if err != nil {
				t.Fatal(err)
			}
			obj := cm("ticking", false)
			if err := c.Create(obj); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for ; len(s.rec.hotLoopsIn(c.Namespace, c.Started)) == 0 && time.Since(start) < patience; writes++ {
				<-tick.C
				patch := client.MergeFrom(obj.DeepCopy())
				obj.Data = map[string]string{"i": strconv.Itoa(writes)}
				if err := w.Patch(context.Background(), obj, patch); err != nil {
					t.Fatal(err)
				}
			}
			if h := s.rec.hotLoopsIn(c.Namespace, c.Started); len(h) > 0 {
				flagged = h[0].At.Sub(start)
			}
		})
		if flagged == 0 {
			t.Fatalf("a writer aiming at 20 writes/s was never flagged in %d writes over %s", writes, patience)
		}
		t.Logf("hot-loop oracle flagged a writer aiming at 20 writes/s %s after its first write, at its write %d", flagged.Round(time.Millisecond), writes)
		if msg := strings.Join(p.Errors(), "\n"); !strings.Contains(msg, "oracle hot-loop: ConfigMap/ticking") || !strings.Contains(msg, "data.i") {
			t.Fatalf("cleanup errors %q, want the hot loop named with its field", p.Errors())
		}
	})
	t.Run("hot loop of a controller answering its own writes", func(t *testing.T) {
		p := probe("looper", func(c *Case) {
			c.OptOut(Convergence, "the looper never stops")
			if err := c.Create(cm("spin", true)); err != nil {
				t.Fatal(err)
			}
			NewWithT(t).Eventually(func() int { return len(s.rec.hotLoopsIn(c.Namespace, c.Started)) }).WithTimeout(patience).Should(Equal(1))
		})
		if msg := strings.Join(p.Errors(), "\n"); !strings.Contains(msg, "ConfigMap/spin was written") || !strings.Contains(msg, "op/looper patch") {
			t.Fatalf("cleanup errors %q, want the looper named", p.Errors())
		}
	})
	t.Run("a name created again is another object", func(t *testing.T) {
		c := s.NewCase(t)
		for range 2 {
			if err := c.Create(cm("again", false)); err != nil {
				t.Fatal(err)
			}
			if err := c.Delete(cm("again", false)); err != nil {
				t.Fatal(err)
			}
		}
		created := c.Writes(WriteFilter{Name: "again", Verb: VerbCreate})
		if len(created) != 2 || created[0].UID == "" || created[1].UID == "" || created[0].UID == created[1].UID {
			t.Fatalf("creates %v with uids %q, want two incarnations, each with its own uid", created, uids(created))
		}
	})
	t.Run("shared field", func(t *testing.T) {
		// applyTo applies data.k of ConfigMap name as field manager owner.
		applyTo := func(c *Case, name, owner string) {
			u := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace}, Data: map[string]string{"k": "v"}}
			if err := s.Client.Patch(context.Background(), u, client.Apply, client.FieldOwner(owner), client.ForceOwnership); err != nil {
				t.Fatal(err)
			}
		}
		apply := func(c *Case, owner string) { applyTo(c, "shared", owner) }
		p := probe("shared", func(c *Case) {
			apply(c, "alpha")
			apply(c, "beta")
			c.RequireQuiescent(300*time.Millisecond, patience)
		})
		if msg := strings.Join(p.Errors(), "\n"); !strings.Contains(msg, "ConfigMap/shared field data.k is owned by field managers alpha and beta") {
			t.Fatalf("cleanup errors %q, want data.k and both managers named", p.Errors())
		}
		p = probe("shared-declared", func(c *Case) {
			apply(c, "alpha")
			apply(c, "beta")
			c.AllowSharedField(Objects{Kind: "ConfigMap", Name: "shared"}, "data.k", "both appliers set the same value on purpose")
			c.RequireQuiescent(300*time.Millisecond, patience)
		})
		if p.Failed() {
			t.Fatalf("a declared shared field failed the case: %q %q", p.Fatals(), p.Errors())
		}
		// Declared by kind and owner kind: the field of every ConfigMap a Secret owns, whatever its generated
		// name, and of no other ConfigMap.
		var owned []string
		p = probe("shared-by-owner", func(c *Case) {
			md := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "md"}}
			if err := c.Create(md); err != nil {
				t.Fatal(err)
			}
			ref := metav1.OwnerReference{APIVersion: "v1", Kind: "Secret", Name: md.Name, UID: md.UID}
			for _, refs := range [][]metav1.OwnerReference{{ref}, {ref}, nil} {
				o := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "ms-", OwnerReferences: refs}}
				if err := c.Create(o); err != nil {
					t.Fatal(err)
				}
				if refs != nil {
					owned = append(owned, o.Name)
				}
				applyTo(c, o.Name, "alpha")
				applyTo(c, o.Name, "beta")
			}
			c.AllowSharedField(Objects{Kind: "ConfigMap", OwnerKind: "Secret"}, "data.k", "the owner's controller co-owns it on purpose")
			c.RequireQuiescent(300*time.Millisecond, patience)
		})
		msg := strings.Join(p.Errors(), "\n")
		if strings.Count(msg, "field data.k is owned by field managers alpha and beta") != 1 || strings.Contains(msg, owned[0]) || strings.Contains(msg, owned[1]) {
			t.Fatalf("cleanup errors %q, want only the ConfigMap no Secret owns named, not %v", p.Errors(), owned)
		}
		if rep := strings.Join(p.Reports(), "\n"); !strings.Contains(rep, "every ConfigMap owned by a Secret data.k") {
			t.Errorf("reports %q, want the declaration shown", p.Reports())
		}
	})
	t.Run("convergence", func(t *testing.T) {
		p := probe("never-quiet", func(c *Case) {
			// The staller holds a pass through the whole cleanup (until AfterCleanup): a held pass cannot
			// end early, where a writer's round trip through a loaded API server can outlast the
			// convergence window.
			o := cm("stuck", false)
			o.Labels = map[string]string{"stall": "true"}
			if err := c.Create(o); err != nil {
				t.Fatal(err)
			}
			requireStalled(t, s, c)
		})
		if msg := strings.Join(p.Errors(), "\n"); !strings.Contains(msg, "oracle convergence") || !strings.Contains(msg, "not quiescent") {
			t.Fatalf("cleanup errors %q, want a namespace that never went quiet", p.Errors())
		}
		p = probe("never-reconciled", func(c *Case) {})
		if msg := strings.Join(p.Errors(), "\n"); !strings.Contains(msg, "no controller ever ran a reconcile pass") {
			t.Fatalf("cleanup errors %q, want a namespace no controller reconciled", p.Errors())
		}
		p = probe("opted-out", func(c *Case) { c.OptOut(Convergence, "nothing to reconcile here") })
		if p.Failed() || len(p.Reports()) != 1 || !strings.Contains(p.Reports()[0], "nothing to reconcile here") {
			t.Fatalf("opted out: fatals %q errors %q reports %q, want the reason reported and no failure", p.Fatals(), p.Errors(), p.Reports())
		}
		p = probe("no reason", func(c *Case) { c.OptOut(Convergence, " ") })
		if len(p.Fatals()) != 1 || !strings.Contains(p.Fatals()[0], "without a reason") {
			t.Fatalf("an opt-out without a reason: fatals %q", p.Fatals())
		}
	})
}

// uids lists the uid of each write.
func uids(ws []Write) []string {
	var out []string
	for _, w := range ws {
		out = append(out, string(w.UID))
	}
	return out
}
