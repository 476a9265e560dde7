package matrixone

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mov1 "github.com/ensembletest/ensemble/operators/matrixone/api/v1alpha1"
)

// CNClaimSetReconciler reconciles CNClaimSets (controller "matrixone-cnclaimset", finalizer
// matrixorigin.io/matrixone-cnclaimset), docs/architecture.md §7 CNClaimSet:
//
//  1. list the claims the set selects (spec.selector, else matrixorigin.io/claimset=<set>); split them into
//     owned and lost (phase Lost, no claim.matrixorigin.io/instance-id label, or being deleted);
//  2. when the owned count differs from status.replicas, re-list without the cache (APIReader); a count
//     that still differs from the cached one means a stale cache: requeue ClaimSetRequeue;
//  3. scale out with claims <set>-<5 random characters> (labels: template labels, claimset, instance-id;
//     ownerName defaults to the set's name; the set as controller owner); scale in by CNClaimScaleInOrder,
//     never a claim that is mid-migration (spec.sourcePod set); delete the lost claims;
//  4. status: replicas (owned), readyReplicas (owned and Bound), claims, labelSelector.
//
// Being deleted, the set deletes its claims and drops its finalizer once none is left.
type CNClaimSetReconciler struct {
	// Client is used for every read and write; nil means mgr.GetClient() at setup.
	Client client.Client
	// APIReader reads without the cache (the uncached re-list); nil means mgr.GetAPIReader() at setup.
	APIReader client.Reader
	// Options are the defect switches and durations; zero durations mean their defaults.
	Options Options
}

// SetupWithManager registers the controller "matrixone-cnclaimset" with mgr: For(CNClaimSet) with
// the default filter, Owns(CNClaim).
func (r *CNClaimSetReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&mov1.CNClaimSet{}, builder.WithPredicates(cnDefaultFilter())).
		Owns(&mov1.CNClaim{}).
		Named(CNClaimSetControllerName).
		Complete(r)
}

// Reconcile runs one pass of the framework over one CNClaimSet.
func (r *CNClaimSetReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	opts := r.Options.WithDefaults()
	f := &cnFrame[*mov1.CNClaimSet]{
		c: r.Client, opts: opts, finalizer: FinalizerPrefix + CNClaimSetControllerName,
		newObj: func() *mov1.CNClaimSet { return &mov1.CNClaimSet{} },
		status: func(s *mov1.CNClaimSet) any { return *s.Status.DeepCopy() },
		observe: func(ctx context.Context, s *mov1.CNClaimSet) (cnAction, error) {
			return r.observe(ctx, s, opts)
		},
		finalize: r.finalize,
	}
	return f.reconcile(ctx, req.NamespacedName)
}

// CNClaimSetSelector returns the set's claim selector: spec.selector, else matrixorigin.io/claimset=<set>.
func CNClaimSetSelector(s *mov1.CNClaimSet) (labels.Selector, error) {
	if s.Spec.Selector != nil {
		return metav1.LabelSelectorAsSelector(s.Spec.Selector)
	}
	return labels.SelectorFromSet(labels.Set{LabelClaimSet: s.Name}), nil
}

// cnClaimIsLost reports whether a claim no longer counts for its set: Lost, without instance ID, or being
// deleted.
func cnClaimIsLost(c *mov1.CNClaim) bool {
	return c.Status.Phase == mov1.CNClaimPhaseLost || c.Labels[LabelClaimInstanceID] == "" ||
		!c.DeletionTimestamp.IsZero()
}

func (r *CNClaimSetReconciler) list(ctx context.Context, rd client.Reader, s *mov1.CNClaimSet, sel labels.Selector) (
	owned, lost []mov1.CNClaim, err error) {
	list := &mov1.CNClaimList{}
	if err := rd.List(ctx, list, client.InNamespace(s.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, nil, err
	}
	for _, c := range list.Items {
		if cnClaimIsLost(&c) {
			lost = append(lost, c)
		} else {
			owned = append(owned, c)
		}
	}
	return owned, lost, nil
}

// cnClaimPhaseRank orders claims for scale-in: Pending (or none) < Outdated < Bound.
func cnClaimPhaseRank(p mov1.CNClaimPhase) int {
	switch p {
	case mov1.CNClaimPhaseBound:
		return 2
	case mov1.CNClaimPhaseOutdated:
		return 1
	}
	return 0
}

// CNClaimScaleInOrder returns the claims a set removes first, in order: claims mid-migration (spec.sourcePod
// set) are left out; claims without a pod first, then lower phase (Pending < Outdated < Bound), then lower
// pod deletion cost (annotation controller.kubernetes.io/pod-deletion-cost of the claim's pod, from pods
// by name), then by name.
func CNClaimScaleInOrder(claims []mov1.CNClaim, pods map[string]*corev1.Pod) []mov1.CNClaim {
	var out []mov1.CNClaim
	for _, c := range claims {
		if c.Spec.SourcePod == nil {
			out = append(out, c)
		}
	}
	cost := func(c *mov1.CNClaim) int {
		if p := pods[c.Spec.PodName]; p != nil {
			if v, err := strconv.Atoi(p.Annotations[AnnotationDeletionCost]); err == nil {
				return v
			}
		}
		return 0
	}
	slices.SortStableFunc(out, func(a, b mov1.CNClaim) int {
		ha, hb := a.Spec.PodName != "", b.Spec.PodName != ""
		if ha != hb {
			if !ha {
				return -1
			}
			return 1
		}
		if ra, rb := cnClaimPhaseRank(a.Status.Phase), cnClaimPhaseRank(b.Status.Phase); ra != rb {
			return ra - rb
		}
		if ca, cb := cost(&a), cost(&b); ca != cb {
			return ca - cb
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}

// CNClaimForSet returns a new claim of set s with instance ID id: name <set>-<id>, the template's labels
// and annotations plus matrixorigin.io/claimset and claim.matrixorigin.io/instance-id, the template's spec
// with ownerName defaulting to the set's name, and the set as controller owner.
func CNClaimForSet(s *mov1.CNClaimSet, id string) *mov1.CNClaim {
	lbls := maps.Clone(s.Spec.Template.Metadata.Labels)
	if lbls == nil {
		lbls = map[string]string{}
	}
	lbls[LabelClaimSet] = s.Name
	lbls[LabelClaimInstanceID] = id
	spec := *s.Spec.Template.Spec.DeepCopy()
	if spec.OwnerName == "" {
		spec.OwnerName = s.Name
	}
	spec.PodName, spec.NodeName, spec.SourcePod = "", "", nil
	return &mov1.CNClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name: s.Name + "-" + id, Namespace: s.Namespace, Labels: lbls,
			Annotations:     maps.Clone(s.Spec.Template.Metadata.Annotations),
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(s, mov1.GroupVersion.WithKind("CNClaimSet"))},
		},
		Spec: spec,
	}
}

func (r *CNClaimSetReconciler) observe(ctx context.Context, s *mov1.CNClaimSet, opts Options) (cnAction, error) {
	sel, err := CNClaimSetSelector(s)
	if err != nil {
		return nil, fmt.Errorf("claimset %s selector: %w", s.Name, err)
	}
	if !sel.Matches(labels.Set(CNClaimForSet(s, "xxxxx").Labels)) {
		return nil, fmt.Errorf("claimset %s: selector %q does not select the template's claims", s.Name, sel)
	}
	owned, lost, err := r.list(ctx, r.Client, s, sel)
	if err != nil {
		return nil, err
	}
	if len(owned) != int(s.Status.Replicas) && r.APIReader != nil {
		fresh, _, err := r.list(ctx, r.APIReader, s, sel)
		if err != nil {
			return nil, err
		}
		if len(fresh) != len(owned) {
			return nil, cnResync(opts.ClaimSetRequeue, "claim cache of set %s is not up to date", s.Name)
		}
	}
	slices.SortFunc(owned, func(a, b mov1.CNClaim) int { return strings.Compare(a.Name, b.Name) })

	st := mov1.CNClaimSetStatus{Replicas: int32(len(owned)), LabelSelector: sel.String()}
	for _, c := range owned {
		if c.Status.Phase == mov1.CNClaimPhaseBound {
			st.ReadyReplicas++
		}
		st.Claims = append(st.Claims, mov1.CNClaimSetClaim{ClaimName: c.Name, PodName: c.Spec.PodName, Phase: c.Status.Phase})
	}
	s.Status = st

	diff := int(s.Spec.Replicas) - len(owned)
	var victims []mov1.CNClaim
	if diff < 0 {
		pods := &corev1.PodList{}
		if err := r.Client.List(ctx, pods, client.InNamespace(s.Namespace),
			client.MatchingLabels{LabelComponent: ComponentCN}); err != nil {
			return nil, err
		}
		byName := map[string]*corev1.Pod{}
		for i := range pods.Items {
			byName[pods.Items[i].Name] = &pods.Items[i]
		}
		order := CNClaimScaleInOrder(owned, byName)
		victims = order[:min(-diff, len(order))]
	}
	var doomed []mov1.CNClaim
	for _, c := range lost {
		if c.DeletionTimestamp.IsZero() {
			doomed = append(doomed, c)
		}
	}
	if diff <= 0 && len(victims) == 0 && len(doomed) == 0 {
		return nil, nil
	}
	return func(ctx context.Context) error {
		for i := 0; i < diff; i++ {
			if err := r.createClaim(ctx, s); err != nil {
				return err
			}
		}
		for _, c := range append(victims, doomed...) {
			if err := r.Client.Delete(ctx, &c); client.IgnoreNotFound(err) != nil {
				return err
			}
		}
		return nil
	}, nil
}

func (r *CNClaimSetReconciler) createClaim(ctx context.Context, s *mov1.CNClaimSet) error {
	for range 5 {
		err := r.Client.Create(ctx, CNClaimForSet(s, utilrand.String(5)), client.FieldOwner(FieldOwner))
		if apierrors.IsAlreadyExists(err) {
			continue
		}
		return err
	}
	return fmt.Errorf("create claim of set %s: names taken", s.Name)
}

// finalize deletes the set's claims; done once none is left.
func (r *CNClaimSetReconciler) finalize(ctx context.Context, s *mov1.CNClaimSet) (bool, error) {
	sel, err := CNClaimSetSelector(s)
	if err != nil {
		return true, nil
	}
	owned, lost, err := r.list(ctx, r.Client, s, sel)
	if err != nil {
		return false, err
	}
	all := append(owned, lost...)
	for i := range all {
		if all[i].DeletionTimestamp.IsZero() {
			if err := r.Client.Delete(ctx, &all[i]); client.IgnoreNotFound(err) != nil {
				return false, err
			}
		}
	}
	return len(all) == 0, nil
}
