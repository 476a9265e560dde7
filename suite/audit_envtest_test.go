package suite

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ensembletest/ensemble/internal/controlplane"
)

// TestAuditLogRecordsUnrecordedWriters boots the harness with kube-controller-manager's default controllers
// and no operator, and checks that the writes no client of the harness sends are read from kube-apiserver's
// audit log: kube-controller-manager's, named after its controllers, and a client's of its own identity,
// while a request whose Audit-ID carries auditIDPrefix is left to the harness.
func TestAuditLogRecordsUnrecordedWriters(t *testing.T) {
	if _, err := controlplane.AssetsDir(); err != nil {
		t.Fatal(err)
	}
	s, err := Boot(t.Context(), Options{Scheme: newScheme(),
		WatchKinds: []client.Object{&appsv1.Deployment{}, &appsv1.ReplicaSet{}, &corev1.Pod{}, &corev1.ConfigMap{}}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
	}()
	t.Run("kube-controller-manager's controllers", func(t *testing.T) { testKCMFieldWriters(t, s) })
	t.Run("garbage collector", func(t *testing.T) { testCollectorDeletes(t, s) })
	t.Run("audit ids", func(t *testing.T) { testAuditIDs(t, s) })
}

// testKCMFieldWriters creates a Deployment and checks that its ReplicaSet and Pod are written by
// kube-controller-manager's controllers, by name, and that FieldWriters names no field "<unrecorded>".
func testKCMFieldWriters(t *testing.T, s *Suite) {
	c := s.NewCase(t)
	c.OptOut(Convergence, "no operator runs: kube-controller-manager alone writes")
	g := NewWithT(t)
	labels := map[string]string{"app": "web"}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](1),
		Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.com/web"}}}}}}
	g.Expect(c.Create(d)).To(Succeed())
	// Pods stay Pending with no kubelet: the rollout ends once the ReplicaSet's status counts the pod.
	g.Eventually(func() []Write {
		return c.Writes(WriteFilter{Kind: "ReplicaSet", Controller: "replicaset-controller", Subresource: "status"})
	}).WithTimeout(patience).ShouldNot(BeEmpty())
	c.RequireQuiescent(300*time.Millisecond, patience)

	rs := c.Writes(WriteFilter{Kind: "ReplicaSet", Verb: VerbCreate})
	g.Expect(rs).To(HaveLen(1))
	g.Expect(rs[0].writer()).To(Equal("kube-controller-manager/deployment-controller"))
	g.Expect(rs[0].ResourceVersion).NotTo(BeEmpty())
	g.Expect(rs[0].UID).NotTo(BeEmpty())
	pods := c.Writes(WriteFilter{Kind: "Pod", Verb: VerbCreate})
	g.Expect(pods).To(HaveLen(1))
	// The pod was created with generateName: its name is the API server's answer's.
	g.Expect(pods[0].writer()).To(Equal("kube-controller-manager/replicaset-controller"))
	g.Expect(pods[0].Name).To(HavePrefix(rs[0].Name + "-"))

	got := c.FieldWriters("ReplicaSet", rs[0].Name)
	g.Expect(got).To(HaveKeyWithValue("status.replicas", []string{"kube-controller-manager/replicaset-controller"}))
	for _, kind := range []string{"Deployment", "ReplicaSet"} {
		name := d.Name
		if kind == "ReplicaSet" {
			name = rs[0].Name
		}
		for path, writers := range c.FieldWriters(kind, name) {
			g.Expect(writers).NotTo(ContainElement("<unrecorded>"), "%s/%s field %s", kind, name, path)
		}
	}
}

// testCollectorDeletes deletes an owner and checks that its dependent's deletion is recorded under the
// garbage collector.
func testCollectorDeletes(t *testing.T, s *Suite) {
	c := s.NewCase(t)
	c.OptOut(Convergence, "no operator runs: kube-controller-manager alone writes")
	g := NewWithT(t)
	owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}
	g.Expect(c.Create(owner)).To(Succeed())
	dep := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "dependent",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID}}}}
	g.Expect(c.Create(dep)).To(Succeed())
	g.Expect(c.Delete(owner)).To(Succeed())
	g.Eventually(func() []Write {
		return c.Writes(WriteFilter{Kind: "ConfigMap", Name: "dependent", Verb: VerbDelete})
	}).WithTimeout(patience).Should(ConsistOf(And(
		BeWrite(WriteFilter{Manager: "kube-controller-manager", Controller: "generic-garbage-collector"}),
		HaveField("UID", dep.UID))))
}

// testAuditIDs writes through a client whose requests carry an Audit-ID with auditIDPrefix, as the
// harness's own clients do, and through a service account's client (a client built from a kubeconfig
// Secret, say): only the second is read from the audit log.
func testAuditIDs(t *testing.T, s *Suite) {
	c := s.NewCase(t)
	c.OptOut(Convergence, "no operator runs")
	g := NewWithT(t)
	var n atomic.Int64
	marked := rest.CopyConfig(s.Config)
	marked.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
			r = r.Clone(r.Context())
			r.Header.Set("Audit-ID", fmt.Sprintf("%stest-%d", auditIDPrefix, n.Add(1)))
			return rt.RoundTrip(r)
		})
	}
	mc, err := client.New(marked, client.Options{Scheme: s.scheme})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(mc.Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: "marked"}})).To(Succeed())

	// A service account's client: its own credentials, nothing of the harness's configuration but the
	// server's address and CA.
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "tenant"}}
	g.Expect(c.Create(sa)).To(Succeed())
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}
	g.Expect(s.Client.SubResource("token").Create(t.Context(), sa, tr)).To(Succeed())
	own := &rest.Config{Host: s.Config.Host, BearerToken: tr.Status.Token, UserAgent: "tenant-operator/v1 (linux/amd64) kubernetes/abc/tenant-controller",
		TLSClientConfig: rest.TLSClientConfig{CAData: s.Config.CAData}}
	oc, err := client.New(own, client.Options{Scheme: s.scheme})
	g.Expect(err).NotTo(HaveOccurred())
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "tenant"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create", "update"}}}}
	g.Expect(c.Create(role)).To(Succeed())
	g.Expect(c.Create(&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "tenant"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "tenant"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "tenant", Namespace: c.Namespace}}})).To(Succeed())
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: "own"}}
	g.Expect(oc.Create(t.Context(), cm, client.FieldOwner("tenant"))).To(Succeed())
	// A write the API server refuses is recorded with its error.
	stale := cm.DeepCopy()
	stale.ResourceVersion = "1"
	g.Expect(oc.Update(t.Context(), stale)).NotTo(Succeed())
	user := "system:serviceaccount:" + c.Namespace + ":tenant"
	g.Eventually(func() []Write { return c.Writes(WriteFilter{Manager: user, IncludeRejected: true}) }).WithTimeout(patience).
		Should(HaveExactElements(
			And(BeWrite(WriteFilter{Controller: "tenant-controller", Kind: "ConfigMap", Name: "own", Verb: VerbCreate}),
				HaveField("ResourceVersion", cm.ResourceVersion), HaveField("UID", cm.UID), HaveField("FieldOwner", "tenant")),
			And(BeWrite(WriteFilter{Controller: "tenant-controller", Kind: "ConfigMap", Name: "own", Verb: VerbUpdate, IncludeRejected: true}),
				HaveField("Err", Satisfy(apierrors.IsConflict)), HaveField("ResourceVersion", "")),
		))
	// The audit log holds the marked create before the service account's, and the reader reads it in order.
	g.Expect(c.Writes(WriteFilter{Name: "marked", IncludeRejected: true})).To(BeEmpty(), "a write whose Audit-ID starts with %q was read from the audit log", auditIDPrefix)
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
