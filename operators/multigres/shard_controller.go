package multigres

import (
	"context"
	"errors"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	mgv1 "github.com/ensembletest/ensemble/operators/multigres/api/v1alpha1"
	"github.com/ensembletest/ensemble/operators/multigres/topo"
)

// ShardReconciler reconciles Shards (controller "multigres-shard"), the resource handler of the real operator.
// Each pass, in order (docs/architecture.md §6 Shard):
//
//  1. fetch; deletion path (delete pods, requeue 2 s, drop multigres.com/shard-pvc-orphan last); ensure the
//     finalizer; drain path when pending deletion (each pod one drain step per pass, requeue 2 s;
//     ReadyForDeletion=True once no pod is left);
//  2. updateStatus: server-side apply (owner multigres-resource-handler, forced) of every status field and every
//     condition except StorageClassValid;
//  3. StorageClass guard for the backup class, multiorch pods (one per cell), guard for pool classes
//     (a missing class: StorageClassValid=False and requeue 10 s);
//  4. pool pods <shard>-pool-<pool>-<cell>-<i> with readiness gate PoolerDataReady; unwanted ones get drain
//     "requested";
//  5. data plane (topology unavailable: requeue 5 s): podRoles, the PoolerDataReady pod condition, pruning
//     poolers of gone pods (SHUTDOWN; fixed MG-PRUNE-ON-STALE-PODS confirms the pod is gone with an uncached
//     read first), the drain state machine;
//  6. result: requeue while not converged (clamp(time unconverged, 5 s, 60 s) + up to 20% jitter);
//  7. watches: For(Shard), Owns(Pod), no event filter, so every status write re-triggers the shard.
//
// The seven Defect* switches of Options change steps 3, 5 and 6 as their comments describe.
type ShardReconciler struct {
	// Client is used for every read and write; nil means mgr.GetClient() at setup.
	Client client.Client
	// APIReader reads without the cache: the fixed MG-PRUNE-ON-STALE-PODS path confirms with it that a pod
	// missing from the cache is gone before its pooler is shut down. nil means mgr.GetAPIReader() at setup.
	APIReader client.Reader
	// Topo is the topology store; required (Reconcile returns an error while nil).
	Topo topo.Store
	// Options are the defect switches and durations; zero durations mean their defaults.
	Options Options

	unconverged unconvergedTracker
}

// SetupWithManager registers the controller "multigres-shard" with mgr: For(Shard), Owns(Pod), no
// predicates.
func (r *ShardReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&mgv1.Shard{}).
		Owns(&corev1.Pod{}).
		Named(ShardControllerName).
		Complete(r)
}

// shardPods are the pods a shard owns, split by component.
type shardPods struct {
	all, pool, orch []corev1.Pod
}

// listPods lists the pods with the shard's identity labels that the shard controls. Impostors (matching labels,
// another or no controller) are left out.
func (r *ShardReconciler) listPods(ctx context.Context, shard *mgv1.Shard) (shardPods, error) {
	sel := client.MatchingLabels{
		LabelDatabase: shard.Spec.DatabaseName, LabelTableGroup: shard.Spec.TableGroupName,
		LabelShard: shard.Spec.ShardName,
	}
	if c := shard.Labels[LabelCluster]; c != "" {
		sel[LabelCluster] = c
	}
	list := &corev1.PodList{}
	if err := r.Client.List(ctx, list, client.InNamespace(shard.Namespace), sel); err != nil {
		return shardPods{}, err
	}
	var out shardPods
	for _, p := range list.Items {
		if !ownedBy(&p, shard) {
			continue
		}
		out.all = append(out.all, p)
		switch p.Labels[LabelComponent] {
		case ComponentShardPool:
			out.pool = append(out.pool, p)
		case ComponentMultiorch:
			out.orch = append(out.orch, p)
		}
	}
	return out, nil
}

// poolList is the pool pod list of updateStatus and the data plane.
//
// MG-MULTIORCH-COUNTED-AS-POOL live: the list selects only the identity labels (cluster, database, tablegroup,
// shard), so the multiorch pods are in it and count as pool pods that never register in topology. Fixed: also
// component=shard-pool.
func (p shardPods) poolList(opts Options) []corev1.Pod {
	if opts.IsLive(DefectMultiorchCountedAsPool) {
		return p.all
	}
	return p.pool
}

// Reconcile runs one pass over one Shard (see the type's comment for the steps). API and topology errors other
// than topo.ErrUnavailable are returned.
func (r *ShardReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	opts := r.Options.withDefaults()
	if r.Topo == nil {
		return ctrl.Result{}, errors.New("ShardReconciler.Topo is nil")
	}

	// 1. Fetch; deletion; finalizer; drain path.
	shard := &mgv1.Shard{}
	if err := r.Client.Get(ctx, req.NamespacedName, shard); err != nil {
		if apierrors.IsNotFound(err) {
			r.unconverged.reset(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	pods, err := r.listPods(ctx, shard)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !shard.DeletionTimestamp.IsZero() {
		r.unconverged.reset(req.NamespacedName)
		return r.reconcileDelete(ctx, shard, pods, opts)
	}
	if err := ensureFinalizer(ctx, r.Client, shard, FinalizerShardPVCOrphan, FieldOwnerResourceHandler); err != nil {
		return ctrl.Result{}, err
	}
	if pendingDeletion(shard) {
		r.unconverged.reset(req.NamespacedName)
		return r.reconcilePendingDeletion(ctx, shard, pods, opts)
	}

	// 2. updateStatus.
	poolList := pods.poolList(opts)
	st := computeShardStatus(shard, poolList, pods.orch, len(pods.all), metav1.NewTime(opts.Now()))
	if err := r.updateStatus(ctx, shard, st); err != nil {
		return ctrl.Result{}, err
	}

	// 3. StorageClass guard (backup), multiorch pods, guard (pools).
	created, classMissing, err := r.guardStorageClasses(ctx, shard, pods, opts)
	if err != nil {
		return ctrl.Result{}, err
	}
	if classMissing {
		return ctrl.Result{RequeueAfter: opts.StorageClassRequeue}, nil
	}

	// 4. Pool pods; scale-down requests drains.
	n, err := r.ensurePoolPods(ctx, shard, pods)
	if err != nil {
		return ctrl.Result{}, err
	}
	created += n

	// 5. Data plane.
	dp, topoUnavailable, err := r.syncDataPlane(ctx, shard, pods, poolList, opts)
	if err != nil {
		return ctrl.Result{}, err
	}
	if topoUnavailable {
		return ctrl.Result{RequeueAfter: opts.TopologyUnavailableRequeue}, nil
	}

	// 6. Result.
	converged := st.Phase == mgv1.PhaseHealthy && created == 0 && !dp.changed && !dp.draining && dp.rolesComplete
	if converged {
		r.unconverged.reset(req.NamespacedName)
		return ctrl.Result{}, nil
	}
	if opts.IsLive(DefectNoRequeueUnconverged) {
		// MG-NO-REQUEUE-UNCONVERGED (defective): nothing asks for another pass; topology changes emit no
		// Kubernetes event, so a late pooler is never seen.
		return ctrl.Result{}, nil
	}
	res := ctrl.Result{RequeueAfter: r.unconverged.delay(req.NamespacedName, opts)}
	if dp.draining {
		res = minRequeue(res, opts.DrainRequeue)
	}
	return res, nil
}

// guardStorageClasses is step 3: it checks the backup and pool StorageClasses, writes StorageClassValid and
// ensures the multiorch pods in between. It returns the number of multiorch pods created or deleted, and
// classMissing when a class is missing and the pass should requeue after StorageClassRequeue.
func (r *ShardReconciler) guardStorageClasses(ctx context.Context, shard *mgv1.Shard, pods shardPods,
	opts Options) (created int, classMissing bool, err error) {
	logger := log.FromContext(ctx)
	backup := shard.Spec.BackupStorageClass
	var backupMissing []string
	if backup != "" {
		if backupMissing, err = missingStorageClasses(ctx, r.Client, []string{backup}); err != nil {
			return 0, false, err
		}
	}
	poolMissing, err := missingStorageClasses(ctx, r.Client,
		poolStorageClasses(shard.Spec.Pools, opts.IsLive(DefectConditionMapOrder)))
	if err != nil {
		return 0, false, err
	}
	split := opts.IsLive(DefectStorageClassSplitWriters)
	if split {
		// MG-STORAGECLASS-SPLIT-WRITERS (defective): the backup check writes StorageClassValid with its own
		// message; the pool check below overwrites it with another, every pass.
		if backup != "" {
			if err := r.writeStorageClassValid(ctx, shard,
				backupStorageClassCondition(backup, len(backupMissing) > 0, shard.Generation), opts); err != nil {
				return 0, false, err
			}
		}
	} else {
		// Fixed: one verdict over every class, written once and skipped when unchanged.
		all := append(append([]string{}, backupMissing...), poolMissing...)
		if err := r.writeStorageClassValid(ctx, shard, storageClassCondition(all, shard.Generation), opts); err != nil {
			return 0, false, err
		}
	}
	if len(backupMissing) > 0 {
		logger.Info("backup storage class missing; requeue", "class", backup, "after", opts.StorageClassRequeue)
		return 0, true, nil
	}
	created, err = r.ensureMultiorchPods(ctx, shard, pods)
	if err != nil {
		return 0, false, err
	}
	if split {
		if err := r.writeStorageClassValid(ctx, shard, poolStorageClassCondition(poolMissing, shard.Generation), opts); err != nil {
			return 0, false, err
		}
	}
	if len(poolMissing) > 0 {
		logger.Info("pool storage classes missing; requeue", "classes", poolMissing, "after", opts.StorageClassRequeue)
		return 0, true, nil
	}
	return created, false, nil
}

// syncDataPlane is step 5: it reads the shard's poolers from topology and runs the data plane over them. It
// returns topoUnavailable when topology is unavailable and the pass should requeue after
// TopologyUnavailableRequeue.
func (r *ShardReconciler) syncDataPlane(ctx context.Context, shard *mgv1.Shard, pods shardPods,
	poolList []corev1.Pod, opts Options) (dp dataPlaneResult, topoUnavailable bool, err error) {
	poolers, err := r.Topo.Poolers(ctx, shard.Namespace, shardKey(shard))
	if errors.Is(err, topo.ErrUnavailable) {
		log.FromContext(ctx).Info("topology unavailable; requeue", "after", opts.TopologyUnavailableRequeue)
		return dataPlaneResult{}, true, nil
	}
	if err != nil {
		return dataPlaneResult{}, false, fmt.Errorf("list poolers: %w", err)
	}
	dp, err = r.dataPlane(ctx, shard, pods, poolList, poolers, opts)
	if err != nil {
		return dataPlaneResult{}, false, err
	}
	return dp, false, nil
}

// updateStatus applies st as the whole status (every field, conditions except StorageClassValid) with field owner
// multigres-resource-handler, forced. A value-identical apply is a no-op on the server.
func (r *ShardReconciler) updateStatus(ctx context.Context, shard *mgv1.Shard, st mgv1.ShardStatus) error {
	m, err := toMap(&st)
	if err != nil {
		return err
	}
	if err := applyStatus(ctx, r.Client, statusPayload(gvkShard, shard.Namespace, shard.Name, m),
		FieldOwnerResourceHandler); err != nil {
		return fmt.Errorf("updateStatus: %w", err)
	}
	// Keep the in-memory copy in step with what was applied (StorageClassValid stays as read).
	conds := st.Conditions
	for _, c := range shard.Status.Conditions {
		if c.Type == mgv1.ConditionStorageClassValid {
			conds = append(conds, c)
		}
	}
	st.Conditions = conds
	shard.Status = st
	return nil
}

// reconcileDelete deletes every owned pod, requeues (2 s) until none is left, then drops the finalizer.
func (r *ShardReconciler) reconcileDelete(ctx context.Context, shard *mgv1.Shard, pods shardPods, opts Options) (ctrl.Result, error) {
	for i := range pods.all {
		p := &pods.all[i]
		if p.DeletionTimestamp.IsZero() {
			if err := r.Client.Delete(ctx, p); client.IgnoreNotFound(err) != nil {
				return ctrl.Result{}, fmt.Errorf("delete pod %s: %w", p.Name, err)
			}
		}
	}
	if len(pods.all) > 0 {
		return ctrl.Result{RequeueAfter: opts.DrainRequeue}, nil
	}
	return ctrl.Result{}, removeFinalizer(ctx, r.Client, shard, FinalizerShardPVCOrphan, FieldOwnerResourceHandler)
}

// reconcilePendingDeletion drains every owned pod one step, writes status (ReadyForDeletion True once no pod is
// left) and requeues 2 s while pods remain.
func (r *ShardReconciler) reconcilePendingDeletion(ctx context.Context, shard *mgv1.Shard, pods shardPods, opts Options) (ctrl.Result, error) {
	var byHost map[string]*topo.Pooler
	if len(pods.all) > 0 {
		poolers, err := r.Topo.Poolers(ctx, shard.Namespace, shardKey(shard))
		if errors.Is(err, topo.ErrUnavailable) {
			return ctrl.Result{RequeueAfter: opts.TopologyUnavailableRequeue}, nil
		}
		if err != nil {
			return ctrl.Result{}, fmt.Errorf("list poolers: %w", err)
		}
		byHost = poolersByHost(poolers)
	}
	for i := range pods.all {
		p := &pods.all[i]
		if !p.DeletionTimestamp.IsZero() {
			continue
		}
		if _, err := r.advanceDrain(ctx, p, byHost[p.Name]); err != nil {
			return ctrl.Result{}, err
		}
	}
	st := computeShardStatus(shard, pods.poolList(opts), pods.orch, len(pods.all), metav1.NewTime(opts.Now()))
	if err := r.updateStatus(ctx, shard, st); err != nil {
		return ctrl.Result{}, err
	}
	if len(pods.all) > 0 {
		return ctrl.Result{RequeueAfter: opts.DrainRequeue}, nil
	}
	return ctrl.Result{}, nil
}

// ensureMultiorchPods creates the missing multiorch pods (one per cell) and deletes owned multiorch pods of cells
// no longer wanted. Returns the number of pods created or deleted.
func (r *ShardReconciler) ensureMultiorchPods(ctx context.Context, shard *mgv1.Shard, pods shardPods) (int, error) {
	have := map[string]bool{}
	for _, p := range pods.orch {
		have[p.Name] = true
	}
	want := map[string]bool{}
	n := 0
	for _, cell := range orchCells(shard) {
		name := MultiorchPodName(shard.Name, cell)
		want[name] = true
		if have[name] {
			continue
		}
		if err := r.createPod(ctx, multiorchPod(shard, cell)); err != nil {
			return n, err
		}
		n++
	}
	for i := range pods.orch {
		p := &pods.orch[i]
		if !want[p.Name] && p.DeletionTimestamp.IsZero() {
			if err := r.Client.Delete(ctx, p); client.IgnoreNotFound(err) != nil {
				return n, fmt.Errorf("delete pod %s: %w", p.Name, err)
			}
			n++
		}
	}
	return n, nil
}

// ensurePoolPods creates the missing pool pods and sets drain "requested" on owned pool pods that are no longer
// wanted (indexes >= replicasPerCell, removed pools or cells). Returns the number of pods created or marked.
func (r *ShardReconciler) ensurePoolPods(ctx context.Context, shard *mgv1.Shard, pods shardPods) (int, error) {
	have := map[string]bool{}
	for _, p := range pods.pool {
		have[p.Name] = true
	}
	want := map[string]bool{}
	n := 0
	for _, d := range desiredPoolPods(shard) {
		want[d.Name] = true
		if have[d.Name] {
			continue
		}
		if err := r.createPod(ctx, poolPod(shard, d)); err != nil {
			return n, err
		}
		n++
	}
	for i := range pods.pool {
		p := &pods.pool[i]
		if !want[p.Name] && p.DeletionTimestamp.IsZero() && p.Annotations[AnnotationDrainState] == "" {
			if err := r.setDrainState(ctx, p, DrainRequested); err != nil {
				return n, err
			}
			n++
		}
	}
	return n, nil
}

// createPod creates pod with field owner multigres-resource-handler; a pod of that name that already exists
// (e.g. an impostor the shard does not own) is left alone.
func (r *ShardReconciler) createPod(ctx context.Context, pod *corev1.Pod) error {
	err := r.Client.Create(ctx, pod, client.FieldOwner(FieldOwnerResourceHandler))
	if apierrors.IsAlreadyExists(err) {
		log.FromContext(ctx).Info("pod already exists (cache lag, or a pod the shard does not own); left alone",
			"pod", pod.Name)
		return nil
	}
	if err != nil {
		return fmt.Errorf("create pod %s: %w", pod.Name, err)
	}
	return nil
}

// dataPlaneResult summarises step 5.
type dataPlaneResult struct {
	changed       bool // a podRoles, pod condition or topology write was made
	draining      bool // some pod is in the drain state machine
	rolesComplete bool // every pod of the pool list has a role
}

// dataPlane is step 5: podRoles from topology, the PoolerDataReady pod condition, pruning poolers of gone pods,
// and one drain step for each draining pod.
func (r *ShardReconciler) dataPlane(ctx context.Context, shard *mgv1.Shard, pods shardPods, poolList []corev1.Pod,
	poolers []topo.Pooler, opts Options) (dataPlaneResult, error) {
	var res dataPlaneResult
	byHost := poolersByHost(poolers)

	roles := desiredPodRoles(poolList, byHost)
	res.rolesComplete = len(roles) == len(poolList)
	if !maps.Equal(roles, shard.Status.PodRoles) {
		if err := r.patchPodRoles(ctx, shard, roles, opts); err != nil {
			return res, err
		}
		res.changed = true
	}

	for i := range poolList {
		p := &poolList[i]
		if !p.DeletionTimestamp.IsZero() {
			continue
		}
		ready, reason := posture(byHost[p.Name])
		wrote, err := r.setPoolerDataReady(ctx, p, ready, reason, opts)
		if err != nil {
			return res, err
		}
		res.changed = res.changed || wrote
	}

	alive := map[string]bool{}
	for _, p := range pods.all {
		alive[p.Name] = true
	}
	for _, pl := range poolers {
		if pl.Lifecycle != topo.LifecycleShutdown && !alive[pl.Hostname] {
			// MG-PRUNE-ON-STALE-PODS live: alive is the cached pod list, so a pod the cache has not seen yet
			// counts as gone and its live pooler is shut down. Fixed: an uncached read confirms it first.
			if !opts.IsLive(DefectPruneOnStalePods) {
				gone, err := r.podGone(ctx, shard, pl.Hostname)
				if err != nil {
					return res, fmt.Errorf("prune pooler %s: %w", pl.Name, err)
				}
				if !gone {
					continue
				}
			}
			if err := r.Topo.SetLifecycle(ctx, shard.Namespace, pl.Name, topo.LifecycleShutdown); err != nil {
				if errors.Is(err, topo.ErrUnavailable) {
					break
				}
				return res, fmt.Errorf("prune pooler %s: %w", pl.Name, err)
			}
			res.changed = true
		}
	}

	for i := range pods.all {
		p := &pods.all[i]
		if p.Annotations[AnnotationDrainState] == "" || !p.DeletionTimestamp.IsZero() {
			continue
		}
		res.draining = true
		if _, err := r.advanceDrain(ctx, p, byHost[p.Name]); err != nil {
			return res, err
		}
	}
	return res, nil
}

// podGone reports whether the API server, read past the cache, holds no pod named name that shard controls:
// the fixed MG-PRUNE-ON-STALE-PODS check before a pooler is shut down. A pod of that name the shard does not
// control counts as gone, as it does in the cached list. Errors: a nil APIReader, a failed read.
func (r *ShardReconciler) podGone(ctx context.Context, shard *mgv1.Shard, name string) (bool, error) {
	if r.APIReader == nil {
		return false, errors.New("ShardReconciler.APIReader is nil: set it to mgr.GetAPIReader() or use SetupWithManager")
	}
	pod := &corev1.Pod{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: shard.Namespace, Name: name}, pod)
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("read pod %s without the cache: %w", name, err)
	}
	return !ownedBy(pod, shard), nil
}

// shardKey is the topology key of shard.
func shardKey(shard *mgv1.Shard) topo.ShardKey {
	return topo.ShardKey{Database: shard.Spec.DatabaseName, TableGroup: shard.Spec.TableGroupName, Shard: shard.Spec.ShardName}
}

// podLabels are the identity labels of shard's pods in cell, plus component.
func podLabels(shard *mgv1.Shard, cell, component string) map[string]string {
	l := map[string]string{
		LabelDatabase: shard.Spec.DatabaseName, LabelTableGroup: shard.Spec.TableGroupName,
		LabelShard: shard.Spec.ShardName, LabelCell: cell, LabelComponent: component,
	}
	if c := shard.Labels[LabelCluster]; c != "" {
		l[LabelCluster] = c
	}
	return l
}

// PoolPod returns the pool pod the Shard creates for pool pod index of pool in cell: name PoolPodName, identity
// labels plus pool and component=shard-pool, controller owner reference to shard, readiness gate
// PoolerDataReady, containers postgres and multipooler.
func PoolPod(shard *mgv1.Shard, pool, cell string, index int) *corev1.Pod {
	return poolPod(shard, desiredPod{Name: PoolPodName(shard.Name, pool, cell, index), Pool: pool, Cell: cell, Index: index})
}

// poolPod builds the pool pod d of shard.
func poolPod(shard *mgv1.Shard, d desiredPod) *corev1.Pod {
	labels := podLabels(shard, d.Cell, ComponentShardPool)
	labels[LabelPool] = d.Pool
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: d.Name, Namespace: shard.Namespace, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{controllerRef(shard, gvkShard)},
		},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{
				{Name: "postgres", Image: "multigres/pgctld:mini"},
				{Name: "multipooler", Image: "multigres/multipooler:mini"},
			},
			ReadinessGates: []corev1.PodReadinessGate{{ConditionType: PodConditionPoolerDataReady}},
		},
	}
}

// multiorchPod builds the multiorch pod of shard in cell: name MultiorchPodName, identity labels plus
// component=multiorch, controller owner reference to shard, no readiness gate.
func multiorchPod(shard *mgv1.Shard, cell string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: MultiorchPodName(shard.Name, cell), Namespace: shard.Namespace,
			Labels:          podLabels(shard, cell, ComponentMultiorch),
			OwnerReferences: []metav1.OwnerReference{controllerRef(shard, gvkShard)},
		},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "multiorch", Image: "multigres/multiorch:mini"}},
		},
	}
}
