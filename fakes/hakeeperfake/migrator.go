package hakeeperfake

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mov1 "github.com/ensembletest/ensemble/operators/matrixone/api/v1alpha1"
)

// MigratorFieldOwner is the field manager of the migrator agent's claim updates.
const MigratorFieldOwner = "hakeeper-migrator"

// Pod labels the migrator reads (the MatrixOne operator's).
const (
	// LabelPhase is a CN pool pod's phase (Unknown, Idle, Bound, Draining, Terminating).
	LabelPhase = "pool.matrixorigin.io/phase"
	// LabelClaimedBy names the claim a Bound pod serves.
	LabelClaimedBy = "pool.matrixorigin.io/claimed-by"
)

// MigrationTarget picks the pod the migrator agent moves claim to, among pods (the namespace's pods) given
// the namespace's claims. Candidates are the CN pods of the claim's pool (spec.poolName, else the current
// pod's pool-name label) other than its current pod, not being deleted and not Terminating or Draining.
//
//   - live (MO-CLAIM-DOUBLE-BIND defective, as the incident's agent): any candidate, Bound ones included;
//     a pod another claim uses (its spec.podName, or the pod's claimed-by label naming another claim) is
//     preferred, so that the incident reproduces deterministically; then Idle pods; then older, then by name.
//   - fixed: only Idle candidates that no live claim (not being deleted, not Lost) references through
//     spec.podName or spec.sourcePod and that carry no claimed-by label; older first, then by name.
//
// Errors: ErrNotBound (no spec.podName), ErrMigrating (spec.sourcePod set), ErrNoTarget.
func MigrationTarget(claim *mov1.CNClaim, pods []corev1.Pod, claims []mov1.CNClaim, live bool) (string, error) {
	if claim.Spec.PodName == "" {
		return "", fmt.Errorf("claim %s: %w", claim.Name, ErrNotBound)
	}
	if claim.Spec.SourcePod != nil {
		return "", fmt.Errorf("claim %s (from %s): %w", claim.Name, claim.Spec.SourcePod.PodName, ErrMigrating)
	}
	pool := claim.Spec.PoolName
	used := map[string]bool{} // referenced by a live claim other than this one
	for _, c := range claims {
		if c.Name == claim.Name || !c.DeletionTimestamp.IsZero() || c.Status.Phase == mov1.CNClaimPhaseLost {
			continue
		}
		if c.Spec.PodName != "" {
			used[c.Spec.PodName] = true
		}
		if c.Spec.SourcePod != nil {
			used[c.Spec.SourcePod.PodName] = true
		}
	}
	var cands []corev1.Pod
	for _, p := range pods {
		if p.Name == claim.Spec.PodName && pool == "" {
			pool = p.Labels[LabelPoolName]
		}
	}
	for _, p := range pods {
		ph := p.Labels[LabelPhase]
		if p.Name == claim.Spec.PodName || p.Labels[LabelComponent] != ComponentCN ||
			p.Labels[LabelPoolName] != pool || !p.DeletionTimestamp.IsZero() ||
			ph == "Terminating" || ph == "Draining" {
			continue
		}
		if by := p.Labels[LabelClaimedBy]; by != "" && by != claim.Name {
			used[p.Name] = true
		}
		if !live && (ph != "Idle" || used[p.Name] || p.Labels[LabelClaimedBy] != "") {
			continue
		}
		cands = append(cands, p)
	}
	if len(cands) == 0 {
		return "", fmt.Errorf("claim %s in pool %q: %w", claim.Name, pool, ErrNoTarget)
	}
	rank := func(p *corev1.Pod) int {
		switch {
		case live && used[p.Name]:
			return 0
		case p.Labels[LabelPhase] == "Idle":
			return 1
		}
		return 2
	}
	slices.SortStableFunc(cands, func(a, b corev1.Pod) int {
		if ra, rb := rank(&a), rank(&b); ra != rb {
			return ra - rb
		}
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			if a.CreationTimestamp.Before(&b.CreationTimestamp) {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Name, b.Name)
	})
	return cands[0].Name, nil
}

// Migrate is the migrator agent: it moves claim to another pod of its pool by updating its spec
// (spec.sourcePod = the current pod and node, spec.podName = the target, spec.nodeName = the target's node;
// field owner MigratorFieldOwner, optimistic lock, retried on conflict with a fresh pick). The operator's
// CNClaim controller then binds the target (without selectCN's checks) and drains the source. live selects
// the incident's agent (MO-CLAIM-DOUBLE-BIND defective); see MigrationTarget. c should read from the API
// server (not a lagging cache) so the pick sees the latest claims. Returns the target pod's name.
func Migrate(ctx context.Context, c client.Client, claim types.NamespacedName, live bool) (string, error) {
	var target string
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cl := &mov1.CNClaim{}
		if err := c.Get(ctx, claim, cl); err != nil {
			return err
		}
		pods := &corev1.PodList{}
		if err := c.List(ctx, pods, client.InNamespace(claim.Namespace),
			client.MatchingLabels{LabelComponent: ComponentCN}); err != nil {
			return err
		}
		claims := &mov1.CNClaimList{}
		if err := c.List(ctx, claims, client.InNamespace(claim.Namespace)); err != nil {
			return err
		}
		t, err := MigrationTarget(cl, pods.Items, claims.Items, live)
		if err != nil {
			return err
		}
		node := ""
		for _, p := range pods.Items {
			if p.Name == t {
				node = p.Spec.NodeName
			}
		}
		cl.Spec.SourcePod = &mov1.CNClaimSourcePod{PodName: cl.Spec.PodName, NodeName: cl.Spec.NodeName}
		cl.Spec.PodName, cl.Spec.NodeName = t, node
		if err := c.Update(ctx, cl, client.FieldOwner(MigratorFieldOwner)); err != nil {
			return err
		}
		target = t
		return nil
	})
	if err != nil {
		return "", err
	}
	return target, nil
}

// Migrate runs the migrator agent (the package's Migrate) and logs it (op OpMigrate) in namespace's log.
func (r *Registry) Migrate(ctx context.Context, c client.Client, claim types.NamespacedName, live bool) (string, error) {
	t, err := Migrate(ctx, c, claim, live)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.logLocked(Call{Namespace: claim.Namespace, Op: OpMigrate, Args: fmt.Sprintf("claim=%s live=%v", claim.Name, live),
		Result: t, Err: errText(err)})
	return t, err
}
