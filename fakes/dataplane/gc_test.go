package dataplane_test

import (
	"context"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func configMap(ns, name string, owners ...client.Object) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	cm.OwnerReferences = refs(false, owners...)
	return cm
}

func refs(block bool, owners ...client.Object) []metav1.OwnerReference {
	var out []metav1.OwnerReference
	for _, o := range owners {
		gvk := o.GetObjectKind().GroupVersionKind()
		if gvk.Kind == "" {
			switch o.(type) {
			case *corev1.ConfigMap:
				gvk = corev1.SchemeGroupVersion.WithKind("ConfigMap")
			case *corev1.Pod:
				gvk = corev1.SchemeGroupVersion.WithKind("Pod")
			case *rbacv1.ClusterRole:
				gvk = rbacv1.SchemeGroupVersion.WithKind("ClusterRole")
			}
		}
		out = append(out, metav1.OwnerReference{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind,
			Name: o.GetName(), UID: o.GetUID(), BlockOwnerDeletion: ptr(block)})
	}
	return out
}

func ownedPod(ns, name string, block bool, owners ...client.Object) *corev1.Pod {
	p := newPod(ns, name)
	p.OwnerReferences = refs(block, owners...)
	return p
}

func exists(ns, name string, obj client.Object) func() bool {
	return func() bool {
		err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, obj)
		return !apierrors.IsNotFound(err)
	}
}

func TestBackgroundGC(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := namespace(t)
	owner := configMap(ns, "owner")
	other := configMap(ns, "other")
	g.Expect(k8s.Create(ctx, owner)).To(Succeed())
	g.Expect(k8s.Create(ctx, other)).To(Succeed())
	p1 := ownedPod(ns, "p1", false, owner)
	g.Expect(k8s.Create(ctx, p1)).To(Succeed())
	g.Expect(k8s.Create(ctx, ownedPod(ns, "p2", false, owner))).To(Succeed())
	g.Expect(k8s.Create(ctx, configMap(ns, "grandchild", p1))).To(Succeed())
	g.Expect(k8s.Create(ctx, configMap(ns, "two-owners", owner, other))).To(Succeed())
	g.Expect(k8s.Create(ctx, newPod(ns, "free"))).To(Succeed())
	ghost := configMap(ns, "ghost")
	ghost.UID = "00000000-0000-0000-0000-000000000000"
	g.Expect(k8s.Create(ctx, ownedPod(ns, "orphaned", false, ghost))).To(Succeed())

	// A dependent whose owner never existed is collected; live owners keep theirs.
	g.Eventually(exists(ns, "orphaned", &corev1.Pod{})).Should(BeFalse())
	g.Consistently(func() bool {
		return exists(ns, "p1", &corev1.Pod{})() && exists(ns, "p2", &corev1.Pod{})() &&
			exists(ns, "grandchild", &corev1.ConfigMap{})() && exists(ns, "two-owners", &corev1.ConfigMap{})()
	}).WithTimeout(300 * time.Millisecond).Should(BeTrue())

	g.Expect(k8s.Delete(ctx, owner)).To(Succeed())
	g.Eventually(exists(ns, "p1", &corev1.Pod{})).Should(BeFalse())
	g.Eventually(exists(ns, "p2", &corev1.Pod{})).Should(BeFalse())
	g.Eventually(exists(ns, "grandchild", &corev1.ConfigMap{})).Should(BeFalse()) // cascade through p1
	g.Consistently(func() bool {
		return exists(ns, "two-owners", &corev1.ConfigMap{})() && exists(ns, "free", &corev1.Pod{})()
	}).WithTimeout(300 * time.Millisecond).Should(BeTrue())

	// Each at least once: a pod with a nodeName stays, terminating, until the kubelet removes it, and the
	// collector may delete it again meanwhile.
	g.Eventually(func() []string {
		var deleted []string
		for _, e := range dp.Log(ns) {
			if d := e.Kind + "/" + e.Name + e.Err; e.Op == "delete" && !slices.Contains(deleted, d) {
				deleted = append(deleted, d)
			}
		}
		return deleted
	}).Should(ConsistOf("Pod/orphaned", "Pod/p1", "Pod/p2", "ConfigMap/grandchild"))
}

func TestForegroundGCWaitsForBlockingDependents(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := namespace(t)
	owner := configMap(ns, "owner")
	g.Expect(k8s.Create(ctx, owner)).To(Succeed())
	held := ownedPod(ns, "held", true, owner)
	held.Finalizers = []string{"ensemble.test/hold"}
	g.Expect(k8s.Create(ctx, held)).To(Succeed())
	g.Expect(k8s.Create(ctx, ownedPod(ns, "blocking", true, owner))).To(Succeed())
	g.Expect(k8s.Create(ctx, ownedPod(ns, "nonblocking", false, owner))).To(Succeed())

	g.Expect(k8s.Delete(ctx, owner, client.PropagationPolicy(metav1.DeletePropagationForeground))).To(Succeed())
	g.Eventually(exists(ns, "blocking", &corev1.Pod{})).Should(BeFalse())
	g.Eventually(exists(ns, "nonblocking", &corev1.Pod{})).Should(BeFalse())
	g.Eventually(func(g Gomega) {
		p := getPod(g, ns, "held")
		g.Expect(p.DeletionTimestamp).NotTo(BeNil())
	}).Should(Succeed())
	// The terminating, blocking dependent keeps the owner (with its foregroundDeletion finalizer).
	g.Consistently(func(g Gomega) {
		cm := &corev1.ConfigMap{}
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(owner), cm)).To(Succeed())
		g.Expect(cm.DeletionTimestamp).NotTo(BeNil())
		g.Expect(cm.Finalizers).To(ContainElement(metav1.FinalizerDeleteDependents))
	}).WithTimeout(300 * time.Millisecond).Should(Succeed())

	p := getPod(g, ns, "held")
	base := p.DeepCopy()
	p.Finalizers = nil
	g.Expect(k8s.Patch(ctx, p, client.MergeFrom(base))).To(Succeed())
	g.Eventually(exists(ns, "held", &corev1.Pod{})).Should(BeFalse())
	g.Eventually(exists(ns, "owner", &corev1.ConfigMap{})).Should(BeFalse())
}

func TestClusterScopedOwner(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := namespace(t)
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "owner-" + ns}}
	g.Expect(k8s.Create(ctx, role)).To(Succeed())
	g.Expect(k8s.Create(ctx, configMap(ns, "dep", role))).To(Succeed())
	g.Consistently(exists(ns, "dep", &corev1.ConfigMap{})).WithTimeout(200 * time.Millisecond).Should(BeTrue())

	g.Expect(k8s.Delete(ctx, role)).To(Succeed())
	g.Eventually(exists(ns, "dep", &corev1.ConfigMap{})).Should(BeFalse())
}

func TestOrphanDeletion(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := namespace(t)
	owner := configMap(ns, "owner")
	g.Expect(k8s.Create(ctx, owner)).To(Succeed())
	g.Expect(k8s.Create(ctx, ownedPod(ns, "dep", false, owner))).To(Succeed())

	g.Expect(k8s.Delete(ctx, owner, client.PropagationPolicy(metav1.DeletePropagationOrphan))).To(Succeed())
	g.Eventually(exists(ns, "owner", &corev1.ConfigMap{})).Should(BeFalse())
	g.Consistently(func(g Gomega) {
		g.Expect(getPod(g, ns, "dep").OwnerReferences).To(BeEmpty())
	}).WithTimeout(300 * time.Millisecond).Should(Succeed())
}

// TestGCCollectsEveryServedKind: with GCKinds left empty, dependents of kinds nobody listed (a Secret, a
// Service, a ServiceAccount) go with their owner, so no owner kind is silently skipped.
func TestGCCollectsEveryServedKind(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := namespace(t)
	owner := configMap(ns, "owner")
	g.Expect(k8s.Create(ctx, owner)).To(Succeed())
	dependents := []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s", OwnerReferences: refs(false, owner)}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "svc", OwnerReferences: refs(false, owner)},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sa", OwnerReferences: refs(false, owner)}},
	}
	for _, d := range dependents {
		g.Expect(k8s.Create(ctx, d)).To(Succeed())
	}
	g.Expect(k8s.Delete(ctx, owner)).To(Succeed())
	for _, d := range dependents {
		g.Eventually(exists(ns, d.GetName(), d.DeepCopyObject().(client.Object))).WithTimeout(10*time.Second).
			Should(BeFalse(), "%T %s outlived its owner", d, d.GetName())
	}
}
