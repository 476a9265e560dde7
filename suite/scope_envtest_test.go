package suite

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/ensembletest/ensemble/internal/recordtb"
	"github.com/ensembletest/ensemble/suite/perturb"
)

// roleKeeper reconciles cluster-scoped objects: every ClusterRole labelled keep=true gets its finalizer,
// the label seen=yes and a child ClusterRole "<name>-child" it owns; on deletion it releases the finalizer.
type roleKeeper struct{ client.Client }

const keeperFinalizer = "example.com/keep"

func (k *roleKeeper) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	role := &rbacv1.ClusterRole{}
	if err := k.Get(ctx, req.NamespacedName, role); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if role.DeletionTimestamp != nil {
		patch := client.MergeFrom(role.DeepCopy())
		if controllerutil.RemoveFinalizer(role, keeperFinalizer) {
			return ctrl.Result{}, k.Patch(ctx, role, patch)
		}
		return ctrl.Result{}, nil
	}
	if role.Labels["seen"] != "yes" || !controllerutil.ContainsFinalizer(role, keeperFinalizer) {
		patch := client.MergeFrom(role.DeepCopy())
		role.Labels["seen"] = "yes"
		controllerutil.AddFinalizer(role, keeperFinalizer)
		if err := k.Patch(ctx, role, patch); err != nil {
			return ctrl.Result{}, err
		}
	}
	child := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: role.Name + "-child"}}
	if err := controllerutil.SetControllerReference(role, child, k.Scheme()); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, client.IgnoreAlreadyExists(k.Create(ctx, child))
}

func (k *roleKeeper) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&rbacv1.ClusterRole{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetLabels()["keep"] == "true"
		}))).Complete(k)
}

// testClusterScoped checks that a Case admits the cluster-scoped objects it creates and what they own: the
// roleKeeper reconciles them under the gate, their passes, writes and changes are the Case's and no other
// Case's, the Case's List shows only its own, one no Case created is refused at the gate, and the cleanup
// deletes them while the controller can still release its finalizer.
func testClusterScoped(t *testing.T, s *Suite) {
	g := NewWithT(t)
	var aNS, aRole string
	t.Run("two cases", func(t *testing.T) {
		a, b := s.NewCase(t), s.NewCase(t)
		aNS, aRole = a.Namespace, a.Namespace+"-role"
		bRole := b.Namespace + "-role"
		for _, c := range []*Case{a, b} {
			role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: c.Namespace + "-role", Labels: map[string]string{"keep": "true"}}}
			if err := c.Create(role); err != nil {
				t.Fatal(err)
			}
		}
		// One no case created: its requests are refused at the gate.
		stray := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: a.Namespace + "-stray", Labels: map[string]string{"keep": "true"}}}
		if err := s.Client.Create(t.Context(), stray); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = s.Client.Delete(context.Background(), stray) }()

		for _, c := range []*Case{a, b} {
			g.Eventually(func() error {
				return c.Get(c.Namespace+"-role-child", &rbacv1.ClusterRole{})
			}).WithTimeout(patience).Should(Succeed(), "the controller never reconciled %s's cluster-scoped role", c.Namespace)
			c.RequireQuiescent(300*time.Millisecond, patience)
		}
		role := &rbacv1.ClusterRole{}
		g.Expect(a.Get(aRole, role)).To(Succeed())
		g.Expect(role.Labels).To(HaveKeyWithValue("seen", "yes"))

		g.Eventually(func() []Pass {
			return s.rec.passes("", PassFilter{Name: stray.Name, Gated: true})
		}).WithTimeout(patience).ShouldNot(BeEmpty(), "no request for the role no case created was refused at the gate")
		g.Expect(s.rec.passes("", PassFilter{Name: stray.Name})).To(BeEmpty(), "a role no case created was reconciled")
		g.Expect(s.Client.Get(t.Context(), types.NamespacedName{Name: stray.Name}, stray)).To(Succeed())
		g.Expect(stray.Labels).NotTo(HaveKey("seen"))

		names := func(c *Case) (passes, writes, changes, listed []string) {
			for _, p := range c.Passes(PassFilter{Controller: "clusterrole"}) {
				passes = append(passes, p.Request.Name)
			}
			for _, w := range c.Writes(WriteFilter{Kind: "ClusterRole"}) {
				writes = append(writes, w.Name)
			}
			for _, ch := range c.Changes(ChangeFilter{Kind: "ClusterRole"}) {
				changes = append(changes, ch.Name)
			}
			l := &rbacv1.ClusterRoleList{}
			g.Expect(c.List(l)).To(Succeed())
			for _, r := range l.Items {
				listed = append(listed, r.Name)
			}
			return
		}
		for _, c := range []struct {
			c           *Case
			own, others string
		}{{a, aRole, bRole}, {b, bRole, aRole}} {
			passes, writes, changes, listed := names(c.c)
			g.Expect(passes).To(ContainElement(c.own), "%s's passes", c.c.Namespace)
			g.Expect(passes).To(HaveEach(c.own), "%s's passes", c.c.Namespace)
			g.Expect(writes).To(ContainElements(c.own, c.own+"-child"), "%s's writes", c.c.Namespace)
			g.Expect(writes).To(HaveEach(BeElementOf(c.own, c.own+"-child")), "%s's writes", c.c.Namespace)
			g.Expect(changes).To(ContainElements(c.own, c.own+"-child"), "%s's changes", c.c.Namespace)
			g.Expect(changes).To(HaveEach(BeElementOf(c.own, c.own+"-child")), "%s's changes", c.c.Namespace)
			g.Expect(listed).To(ConsistOf(c.own, c.own+"-child"), "%s's List", c.c.Namespace)
		}
	})
	if t.Failed() {
		return
	}
	// The cleanup deleted the case's cluster-scoped objects (the controller released its finalizer, or
	// deletion hygiene would have failed the case) and dropped its claims.
	for _, name := range []string{aRole, aRole + "-child"} {
		err := s.Client.Get(t.Context(), types.NamespacedName{Name: name}, &rbacv1.ClusterRole{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "ClusterRole %s after its case: %v", name, err)
	}
	g.Expect(s.rec.scopes.claimed(aNS)).To(BeEmpty())

	// A cluster-scoped object named after its case's namespace is named in the case's record, and by a point,
	// with the namespace written <namespace>: a point made from one run's record names the same role in
	// another run, whose namespace differs. Both points fire: one on the controller's first write of the
	// role, one on the first change of its child as the manager's watch delivers it.
	t.Run("a point names an object after its case's namespace", func(t *testing.T) {
		dir := t.TempDir()
		s.exploreDir = dir
		defer func() { s.exploreDir = "" }()
		p := &recordtb.TB{TestName: "relative"}
		c := s.NewCase(p)
		role := perturb.CaseNamespace + "-role"
		c.Perturb(perturb.Point{Mode: perturb.Conflict, Writer: "op/clusterrole", Object: "ClusterRole/" + role, Trigger: perturb.Nth(1)})
		c.Perturb(perturb.Point{Mode: perturb.Stale, Writer: "op", Object: "ClusterRole/" + role + "-child", Trigger: perturb.Change(1)})
		if err := c.Create(&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: c.Namespace + "-role", Labels: map[string]string{"keep": "true"}}}); err != nil {
			t.Fatal(err)
		}
		g.Eventually(func() error {
			return c.Get(c.Namespace+"-role-child", &rbacv1.ClusterRole{})
		}).WithTimeout(patience).Should(Succeed(), "the controller never made the role's child")
		c.RequireQuiescent(300*time.Millisecond, patience)
		p.RunCleanups()
		if p.Failed() {
			t.Fatalf("the case failed: %q", p.Errors())
		}
		r, b := onlyRecord(t, dir)
		fired := strings.Join(r.Fired, "\n")
		for _, want := range []string{
			"conflict@op/clusterrole:ClusterRole/<namespace>-role#1 at ClusterRole/" + c.Namespace + "-role (patch by op/clusterrole",
			"stale@op:ClusterRole/<namespace>-role-child^1 at ClusterRole/" + c.Namespace + "-role-child (its change 1",
		} {
			if !strings.Contains(fired, want) {
				t.Errorf("fired:\n%s\nwant %q", fired, want)
			}
		}
		refused := perturb.RecordWrite{Writer: "op/clusterrole", Object: "ClusterRole/<namespace>-role", Verb: "patch", Rejected: true}
		isRefused := func(w perturb.RecordWrite) bool { w.At = time.Time{}; return w == refused }
		if !slices.ContainsFunc(r.Writes, isRefused) || r.Changes["ClusterRole/<namespace>-role-child"] == 0 || r.Seen["op"]["ClusterRole/<namespace>-role-child"] == 0 {
			t.Errorf("record %s\nwant the refused write %+v and the child's changes named after <namespace>", b, refused)
		}
		if strings.Contains(fmt.Sprint(r.Writes, r.Changes, r.Seen), c.Namespace) {
			t.Errorf("the record's writes and changes name the case's namespace %s: %+v %v", c.Namespace, r.Writes, r.Changes)
		}
	})
}

// clientsetWriter annotates every ConfigMap labelled clientset=true through a typed clientset built on
// the manager's rest.Config, on the pass's context: a write no controller-runtime client makes.
type clientsetWriter struct{ cs kubernetes.Interface }

func (w *clientsetWriter) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	patch := []byte(`{"metadata":{"annotations":{"written-by":"clientset"}}}`)
	_, err := w.cs.CoreV1().ConfigMaps(req.Namespace).Patch(ctx, req.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "clientset-writer"})
	return ctrl.Result{}, client.IgnoreNotFound(err)
}

func (w *clientsetWriter) SetupWithManager(mgr ctrl.Manager) error {
	cs, err := kubernetes.NewForConfig(mgr.GetConfig())
	if err != nil {
		return err
	}
	w.cs = cs
	return ctrl.NewControllerManagedBy(mgr).Named("clientset-writer").
		For(&corev1.ConfigMap{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetLabels()["clientset"] == "true"
		}))).Complete(w)
}

// testClientsetWrites checks that a write through a typed clientset built on the manager's rest.Config is
// recorded like the manager's client's: under its manager, its controller and its pass, with its field
// manager and the resourceVersion it made.
func testClientsetWrites(t *testing.T, s *Suite) {
	c := s.NewCase(t)
	if err := c.Create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cs", Labels: map[string]string{"clientset": "true"}}}); err != nil {
		t.Fatal(err)
	}
	var ws []Write
	NewWithT(t).Eventually(func() []Write {
		ws = c.Writes(WriteFilter{Name: "cs", Controller: "clientset-writer"})
		return ws
	}).WithTimeout(patience).ShouldNot(BeEmpty(), "the clientset's write was not recorded")
	w := ws[0]
	if w.Manager != "op" || w.Pass == 0 || w.Verb != VerbPatch || w.FieldOwner != "clientset-writer" || w.ResourceVersion == "" || w.Kind != "ConfigMap" {
		t.Fatalf("the clientset's write %s: want op/clientset-writer's patch of ConfigMap cs in a pass, field manager clientset-writer, with the resourceVersion it made", w.line())
	}
	cm := &corev1.ConfigMap{}
	NewWithT(t).Eventually(func() map[string][]string {
		_ = c.Get("cs", cm)
		return c.FieldWriters("ConfigMap", "cs")
	}).WithTimeout(patience).Should(HaveKeyWithValue("metadata.annotations.written-by", ContainElement("op/clientset-writer")))
}

// annotator is a Runnable, no controller: every 50 ms it lists the ConfigMaps labelled runnable=true in
// every namespace and annotates each once (a refused write is not tried again).
type annotator struct {
	client.Client
	tried map[types.UID]bool
}

func (a *annotator) Start(ctx context.Context) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		l := &corev1.ConfigMapList{}
		if err := a.List(ctx, l, client.MatchingLabels{"runnable": "true"}); err != nil {
			continue
		}
		for i := range l.Items {
			cm := &l.Items[i]
			if a.tried[cm.UID] {
				continue
			}
			a.tried[cm.UID] = true
			patch := client.MergeFrom(cm.DeepCopy())
			cm.Annotations = map[string]string{"annotated-by": "runnable"}
			_ = a.Patch(ctx, cm, patch)
		}
	}
}

// testRunnable checks that a Runnable's writes are recorded under its name and, its manager being gated,
// refused for an object of a namespace no case admitted.
func testRunnable(t *testing.T, s *Suite) {
	g := NewWithT(t)
	c, closed := s.NewCase(t), s.NewCase(t, Unadmitted())
	for _, cs := range []*Case{c, closed} {
		if err := cs.Create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "r", Labels: map[string]string{"runnable": "true"}}}); err != nil {
			t.Fatal(err)
		}
	}
	g.Eventually(func() []Write {
		return c.Writes(WriteFilter{Name: "r", Controller: "suite.annotator"})
	}).WithTimeout(patience).ShouldNot(BeEmpty(), "the runnable's write was not recorded under its name")
	var refused []Write
	g.Eventually(func() []Write {
		refused = closed.Writes(WriteFilter{Name: "r", Controller: "suite.annotator", IncludeRejected: true})
		return refused
	}).WithTimeout(patience).ShouldNot(BeEmpty(), "the runnable's write in the unadmitted namespace was not recorded")
	g.Expect(apierrors.IsForbidden(refused[0].Err)).To(BeTrue(), "the runnable's write in the unadmitted namespace: %v, want refused by the gate", refused[0].Err)
	cm := &corev1.ConfigMap{}
	g.Expect(closed.Get("r", cm)).To(Succeed())
	g.Expect(cm.Annotations).NotTo(HaveKey("annotated-by"))
	closed.OptOut(Convergence, "no controller acts in an unadmitted namespace")
}
