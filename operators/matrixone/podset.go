package matrixone

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	mov1 "github.com/ensembletest/ensemble/operators/matrixone/api/v1alpha1"
)

// The shared pod-set helper behind LogSetReconciler, DNSetReconciler and ProxySetReconciler
// (docs/architecture.md §7 LogSet, DNSet, ProxySet). One pass over a set, in the real framework's order:
//
//  1. fetch; being deleted: delete the pods and the ConfigMap, requeue FinalizeRequeue until the pods are
//     gone, then drop the finalizer matrixorigin.io/<controller-name>;
//  2. DNSet, ProxySet: wait (requeue ActionRequeue) until the LogSet named by spec.deps.logSet is Ready;
//  3. add the finalizer (before any work);
//  4. observe: render the config (spec over the defaults, which carry Options.ConfigRevision), digest it,
//     sync the ConfigMap <name>-config (start.sh and config.toml-<digest>, old keys pruned unless a pod still
//     runs them), compute the whole status (configSuffix = digest), and pick at most one action: create the
//     missing ordinal pods, delete the extra ones, or patch matrixorigin.io/config-suffix on outdated pods
//     (the in-place restart; MO-CONCURRENT-ROLLING-RESTART decides which);
//  5. write the whole status with an Update when it changed;
//  6. run the action; requeue ActionRequeue after it, PodSetResync while not Ready, nothing once Ready.
//
// A write conflict anywhere requeues after ConflictRequeue without an error.

// ConfigMap keys and pod details of a pod set.
const (
	// ConfigFile is the name of the config file; its ConfigMap key is ConfigFile + "-" + digest.
	ConfigFile = "config.toml"
	// EntrypointKey is the ConfigMap key of the container's entrypoint script.
	EntrypointKey = "start.sh"
	// ConfigMountPath is where the ConfigMap is mounted in the container.
	ConfigMountPath = "/etc/matrixone/config"
	// ConfigDefaultsRevisionKey is the config key that carries Options.ConfigRevision in every rendered
	// config; spec.config cannot override it.
	ConfigDefaultsRevisionKey = "defaults-revision"
	// ConfigDiscoveryKey is the config key of DN and proxy configs that carries the LogSet's discovery
	// address (its status.discovery); spec.config cannot override it.
	ConfigDiscoveryKey = "hakeeper-client.discovery-address"
	// podSetImage is the image of every pod-set container (no kubelet runs it: fakes/dataplane).
	podSetImage = "matrixorigin/matrixone:mini"
	// AnnotationInPlaceUpdateState records, on a pod whose config suffix the operator patched, the suffix and
	// the pod's container restart count at that moment (JSON, like OpenKruise's
	// apps.kruise.io/inplace-update-state). Written in the same patch as the suffix, it keeps the pod from
	// counting as Ready on the new config until its containers have restarted since (a cached pod carries
	// the new suffix and the old Ready condition until the kubelet reacts).
	AnnotationInPlaceUpdateState = "matrixorigin.io/inplace-update-state"
	// configSuffixEnv is the environment variable start.sh reads the config suffix from (downward API).
	configSuffixEnv = "CONFIG_SUFFIX"
)

// startScript is the ConfigMap's start.sh: it runs the config the pod's config-suffix annotation names.
var startScript = `#!/bin/sh
# Rendered by the matrixone operator. ` + configSuffixEnv + ` is the pod's ` + AnnotationConfigSuffix + `
# annotation (downward API): changing it restarts the container in place on the matching config.
set -eu
exec /mo-service -cfg "` + ConfigMountPath + `/` + ConfigFile + `-${` + configSuffixEnv + `}"
`

// componentDefaults are the operator's config defaults of each component, under spec.config. Every
// rendered config also carries ConfigDefaultsRevisionKey (and DN/proxy ConfigDiscoveryKey).
var componentDefaults = map[string]map[string]string{
	ComponentLogSet: {
		"service-type":             "LOG",
		"data-dir":                 "/var/lib/matrixone/data",
		"logservice.deployment-id": "1",
		"log.level":                "info",
	},
	ComponentDNSet: {
		"service-type": "DN",
		"data-dir":     "/var/lib/matrixone/data",
		"log.level":    "info",
	},
	ComponentProxySet: {
		"service-type":         "PROXY",
		"proxy.listen-address": "0.0.0.0:6001",
		"log.level":            "info",
	},
}

// RenderConfig renders the TOML config of a component (ComponentLogSet, ComponentDNSet or
// ComponentProxySet): the operator's defaults, overridden by spec (its keys are bare or dotted TOML keys),
// plus ConfigDefaultsRevisionKey = revision and, when discovery is not empty, ConfigDiscoveryKey =
// discovery. Keys are sorted and every value is a TOML basic string, so equal inputs render equal text.
func RenderConfig(component string, spec map[string]string, revision, discovery string) string {
	all := maps.Clone(componentDefaults[component])
	if all == nil {
		all = map[string]string{}
	}
	maps.Copy(all, spec)
	all[ConfigDefaultsRevisionKey] = revision
	if discovery != "" {
		all[ConfigDiscoveryKey] = discovery
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# MatrixOne %s config, rendered by the matrixone operator: do not edit.\n", component)
	for _, k := range slices.Sorted(maps.Keys(all)) {
		fmt.Fprintf(&b, "%s = %s\n", k, tomlString(all[k]))
	}
	return b.String()
}

// tomlString quotes s as a TOML basic string.
func tomlString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\u%04X`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// ConfigDigest is the digest of a rendered config: the first 7 hex characters of its SHA-256.
func ConfigDigest(rendered string) string {
	sum := sha256.Sum256([]byte(rendered))
	return hex.EncodeToString(sum[:])[:7]
}

// ConfigKey is the ConfigMap key of the config with digest: "config.toml-<digest>".
func ConfigKey(digest string) string { return ConfigFile + "-" + digest }

// ConfigMapName is the name of a pod set's ConfigMap: "<name>-config".
func ConfigMapName(set string) string { return set + "-config" }

// PodSetPodName is the name of ordinal pod i of a pod set: "<name>-<i>".
func PodSetPodName(set string, i int) string { return fmt.Sprintf("%s-%d", set, i) }

// DiscoveryAddress is a LogSet's status.discovery: "<namespace>/<name>", the key of its HAKeeper instance.
func DiscoveryAddress(namespace, logSet string) string { return namespace + "/" + logSet }

// desiredConfigData is the data of a pod set's ConfigMap before old keys are merged in.
func desiredConfigData(rendered, digest string) map[string]string {
	return map[string]string{EntrypointKey: startScript, ConfigKey(digest): rendered}
}

// pruneConfigData merges the old ConfigMap data into desired, the real operator's rule: an old key is kept
// only when it embeds the digest of its own value and some pod's config suffix (non-empty) is a substring of
// it. It returns the new data and the old keys dropped (sorted).
func pruneConfigData(old, desired map[string]string, suffixes []string) (map[string]string, []string) {
	data := maps.Clone(desired)
	var dropped []string
	for k, v := range old {
		if _, ok := desired[k]; ok {
			continue
		}
		if strings.Contains(k, ConfigDigest(v)) && configInUse(k, suffixes) {
			data[k] = v
			continue
		}
		dropped = append(dropped, k)
	}
	slices.Sort(dropped)
	return data, dropped
}

// configInUse reports whether some non-empty suffix is a substring of key.
func configInUse(key string, suffixes []string) bool {
	for _, s := range suffixes {
		if s != "" && strings.Contains(key, s) {
			return true
		}
	}
	return false
}

// podView is what the rolling-restart decision needs of a pod.
type podView struct {
	Name    string
	Ordinal int
	Suffix  string // matrixorigin.io/config-suffix
	Ready   bool   // Ready, and running Suffix (inPlaceUpdateDone)
}

// rollingTargets returns the pods whose config suffix to patch to digest in this pass (pods sorted by
// ordinal).
//
// MO-CONCURRENT-ROLLING-RESTART live (concurrent): every pod whose suffix differs, at once: the set restarts
// as soon as its ConfigMap changes. Fixed: at most one pod, the first outdated one, and only when every
// earlier pod is Ready on digest, and only when predecessorsSettled (the components before this one are
// Ready again on the new revision).
func rollingTargets(pods []podView, digest string, concurrent, predecessorsSettled bool) []string {
	var out []string
	if concurrent {
		for _, p := range pods {
			if p.Suffix != digest {
				out = append(out, p.Name)
			}
		}
		return out
	}
	if !predecessorsSettled {
		return nil
	}
	for _, p := range pods {
		if p.Suffix != digest {
			return []string{p.Name}
		}
		if !p.Ready {
			return nil
		}
	}
	return nil
}

// settledOn reports whether a pod set with status st and generation gen is Ready again on the config whose
// digest is want: the status is of the current generation, says Ready, and names want as its suffix.
func settledOn(st *mov1.PodSetStatus, gen int64, want string) bool {
	return st.ObservedGeneration == gen && st.ConfigSuffix == want && st.IsReady()
}

// podOrdinal parses the ordinal of pod name of set ("<set>-<i>"); ok is false for any other name.
func podOrdinal(set, name string) (int, bool) {
	rest, found := strings.CutPrefix(name, set+"-")
	if !found || rest == "" || (len(rest) > 1 && rest[0] == '0') {
		return 0, false
	}
	i, err := strconv.Atoi(rest)
	if err != nil || i < 0 {
		return 0, false
	}
	return i, true
}

// isPodReady reports whether the pod's Ready condition is True.
func isPodReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// inPlaceUpdateState is the value of AnnotationInPlaceUpdateState.
type inPlaceUpdateState struct {
	ConfigSuffix string `json:"configSuffix"`
	RestartCount int32  `json:"restartCount"`
}

// podRestartCount is the highest container restart count the pod reports.
func podRestartCount(p *corev1.Pod) int32 {
	var n int32
	for _, c := range p.Status.ContainerStatuses {
		n = max(n, c.RestartCount)
	}
	return n
}

// inPlaceUpdateDone reports whether the pod's containers run the config its suffix annotation names: true
// unless AnnotationInPlaceUpdateState records an update to that suffix and no container restarted since.
func inPlaceUpdateDone(p *corev1.Pod) bool {
	raw := p.Annotations[AnnotationInPlaceUpdateState]
	if raw == "" {
		return true
	}
	var st inPlaceUpdateState
	if err := json.Unmarshal([]byte(raw), &st); err != nil || st.ConfigSuffix != p.Annotations[AnnotationConfigSuffix] {
		return true
	}
	return podRestartCount(p) > st.RestartCount
}

// podSetStatusFor computes a set's status from its pods: configSuffix digest, readyReplicas (pods Ready on
// digest), Ready when every desired ordinal exists, is Ready on digest and no extra pod is left.
func podSetStatusFor(old mov1.PodSetStatus, gen int64, replicas int32, digest string, pods []podView,
	extra int, now metav1.Time) mov1.PodSetStatus {
	st := *old.DeepCopy()
	st.ObservedGeneration = gen
	st.ConfigSuffix = digest
	var ready int32
	for _, p := range pods {
		if p.Ordinal < int(replicas) && p.Ready && p.Suffix == digest {
			ready++
		}
	}
	st.ReadyReplicas = ready
	c := metav1.Condition{Type: mov1.ConditionTypeReady, ObservedGeneration: gen, LastTransitionTime: now}
	if ready == replicas && extra == 0 {
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, "AllPodsReady",
			fmt.Sprintf("%d/%d pods ready on config %s", ready, replicas, digest)
	} else {
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, "PodsNotReady",
			fmt.Sprintf("%d/%d pods ready on config %s", ready, replicas, digest)
	}
	meta.SetStatusCondition(&st.Conditions, c)
	return st
}

// podSetParts returns the shared parts of a LogSet, DNSet or ProxySet: spec, status, the LogSet it depends
// on ("" for a LogSet) and its component (LabelComponent value).
func podSetParts(obj client.Object) (*mov1.PodSetSpec, *mov1.PodSetStatus, string, string) {
	switch o := obj.(type) {
	case *mov1.LogSet:
		return &o.Spec.PodSetSpec, &o.Status.PodSetStatus, "", ComponentLogSet
	case *mov1.DNSet:
		return &o.Spec.PodSetSpec, &o.Status.PodSetStatus, o.Spec.Deps.LogSet, ComponentDNSet
	case *mov1.ProxySet:
		return &o.Spec.PodSetSpec, &o.Status.PodSetStatus, o.Spec.Deps.LogSet, ComponentProxySet
	}
	panic(fmt.Sprintf("matrixone: %T is not a pod set", obj))
}

// renderFor renders the config of a pod set under opts; logSet is the set's LogSet (nil for a LogSet).
func renderFor(obj client.Object, logSet *mov1.LogSet, opts Options) string {
	spec, _, _, component := podSetParts(obj)
	discovery := ""
	if logSet != nil {
		discovery = logSet.Status.Discovery
	}
	return RenderConfig(component, spec.Config, opts.ConfigRevision, discovery)
}

// podSetReconciler is the shared pod-set reconcile, parameterised by kind.
type podSetReconciler struct {
	client     client.Client
	opts       Options
	controller string
	gvk        schema.GroupVersionKind
	newObj     func() client.Object
}

// setupPodSet registers a pod-set controller named name with mgr: For(obj) with the framework's default
// filter (generation, label or annotation changed, so the set's own status writes do not re-trigger it),
// Owns(Pod) and Owns(ConfigMap) unfiltered, reconciling with r.
func setupPodSet(mgr ctrl.Manager, name string, obj client.Object, r reconcile.Reconciler) error {
	filter := predicate.Or(predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{},
		predicate.AnnotationChangedPredicate{})
	return ctrl.NewControllerManagedBy(mgr).
		For(obj, builder.WithPredicates(filter)).
		Owns(&corev1.Pod{}).
		Owns(&corev1.ConfigMap{}).
		Named(name).
		Complete(r)
}

// podSetAction is the one action an observation may return.
type podSetAction func(ctx context.Context) error

// requeueOnConflict turns a write conflict (or an AlreadyExists from a stale cache) into a requeue after
// ConflictRequeue; other errors are returned.
func requeueOnConflict(err error, opts Options) (ctrl.Result, error) {
	if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
		return ctrl.Result{RequeueAfter: opts.ConflictRequeue}, nil
	}
	return ctrl.Result{}, err
}

// reconcile runs one pass over the pod set req names (see the comment at the top of this file).
func (r *podSetReconciler) reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	opts := r.opts.WithDefaults()
	logger := log.FromContext(ctx)
	obj := r.newObj()
	if err := r.client.Get(ctx, req.NamespacedName, obj); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	spec, status, logSetName, _ := podSetParts(obj)
	finalizer := FinalizerPrefix + r.controller

	if !obj.GetDeletionTimestamp().IsZero() {
		if !controllerutil.ContainsFinalizer(obj, finalizer) {
			return ctrl.Result{}, nil
		}
		done, err := r.finalize(ctx, obj)
		if err != nil {
			return requeueOnConflict(err, opts)
		}
		if !done {
			logger.Info("does not complete finalizing, requeue", "after", opts.FinalizeRequeue)
			return ctrl.Result{RequeueAfter: opts.FinalizeRequeue}, nil
		}
		controllerutil.RemoveFinalizer(obj, finalizer)
		if err := r.client.Update(ctx, obj, client.FieldOwner(FieldOwner)); err != nil {
			return requeueOnConflict(client.IgnoreNotFound(err), opts)
		}
		return ctrl.Result{}, nil
	}

	// Dependencies: a DNSet or ProxySet waits for its LogSet to be Ready, every pass.
	var logSet *mov1.LogSet
	if logSetName != "" {
		logSet = &mov1.LogSet{}
		err := r.client.Get(ctx, client.ObjectKey{Namespace: obj.GetNamespace(), Name: logSetName}, logSet)
		if err != nil && !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		if err != nil || !logSet.Status.IsReady() || logSet.Status.Discovery == "" {
			logger.Info("dependency not ready, requeue", "logSet", logSetName, "after", opts.ActionRequeue)
			return ctrl.Result{RequeueAfter: opts.ActionRequeue}, nil
		}
	}

	if controllerutil.AddFinalizer(obj, finalizer) {
		if err := r.client.Update(ctx, obj, client.FieldOwner(FieldOwner)); err != nil {
			return requeueOnConflict(err, opts)
		}
	}

	before := status.DeepCopy()
	var beforeDiscovery string
	if ls, ok := obj.(*mov1.LogSet); ok {
		beforeDiscovery = ls.Status.Discovery
	}
	action, err := r.observe(ctx, obj, spec, status, logSet, opts)
	if err != nil {
		return requeueOnConflict(err, opts)
	}
	changed := !equality.Semantic.DeepEqual(before, status)
	if ls, ok := obj.(*mov1.LogSet); ok {
		ls.Status.Discovery = DiscoveryAddress(ls.Namespace, ls.Name)
		changed = changed || beforeDiscovery != ls.Status.Discovery
	}
	if changed {
		if err := r.client.Status().Update(ctx, obj, client.FieldOwner(FieldOwner)); err != nil {
			return requeueOnConflict(err, opts)
		}
	}
	if action != nil {
		if err := action(ctx); err != nil {
			return requeueOnConflict(err, opts)
		}
		return ctrl.Result{RequeueAfter: opts.ActionRequeue}, nil
	}
	if !status.IsReady() {
		return ctrl.Result{RequeueAfter: opts.PodSetResync}, nil
	}
	return ctrl.Result{}, nil
}

// observe renders the config, syncs the ConfigMap, computes the whole status into status and returns the
// action of this pass (nil when there is none).
func (r *podSetReconciler) observe(ctx context.Context, obj client.Object, spec *mov1.PodSetSpec,
	status *mov1.PodSetStatus, logSet *mov1.LogSet, opts Options) (podSetAction, error) {
	rendered := renderFor(obj, logSet, opts)
	digest := ConfigDigest(rendered)
	if err := r.syncConfigMap(ctx, obj, rendered, digest); err != nil {
		return nil, err
	}

	owned, err := r.ownedPods(ctx, obj)
	if err != nil {
		return nil, err
	}
	views, extra, missing := partitionPods(obj.GetName(), spec.Replicas, owned)
	*status = podSetStatusFor(*status, obj.GetGeneration(), spec.Replicas, digest, views, len(extra),
		metav1.NewTime(opts.Now()))

	if len(missing) > 0 {
		return r.createPodsAction(obj, missing, digest), nil
	}
	if len(extra) > 0 {
		return r.deletePodsAction(extra), nil
	}

	var targets []string
	if opts.IsLive(DefectConcurrentRollingRestart) {
		// MO-CONCURRENT-ROLLING-RESTART (defective): the controller patches every pod's config suffix as soon
		// as its ConfigMap changes, whatever the other components are doing, so a defaults change (an
		// operator upgrade) restarts LogSet, DNSet and ProxySet pods at the same time.
		targets = rollingTargets(views, digest, true, true)
	} else {
		// Fixed: one component at a time (LogSet, then DNSet, then ProxySet), each waiting until the
		// components before it are Ready again on the new revision, and one pod at a time.
		var settled bool
		if slices.ContainsFunc(views, func(v podView) bool { return v.Suffix != digest }) {
			if settled, err = r.predecessorsSettled(ctx, obj, logSet, opts); err != nil {
				return nil, err
			}
		}
		targets = rollingTargets(views, digest, false, settled)
	}
	if len(targets) == 0 {
		return nil, nil
	}
	return r.patchSuffixAction(owned, targets, digest), nil
}

// partitionPods sorts the pods a set named set owns into the views of the pods within its replicas (by
// ordinal) and the extra pods to delete, and lists the ordinals below replicas that have no pod.
func partitionPods(set string, replicas int32, owned []*corev1.Pod) (views []podView, extra []*corev1.Pod,
	missing []int) {
	have := map[int]bool{}
	for _, p := range owned {
		i, ok := podOrdinal(set, p.Name)
		if !ok || i >= int(replicas) {
			extra = append(extra, p)
			continue
		}
		have[i] = true
		views = append(views, podView{Name: p.Name, Ordinal: i, Suffix: p.Annotations[AnnotationConfigSuffix],
			Ready: isPodReady(p) && inPlaceUpdateDone(p)})
	}
	slices.SortFunc(views, func(a, b podView) int { return a.Ordinal - b.Ordinal })
	for i := range int(replicas) {
		if !have[i] {
			missing = append(missing, i)
		}
	}
	return views, extra, missing
}

// createPodsAction returns the action that creates obj's pods of the missing ordinals, on config digest.
func (r *podSetReconciler) createPodsAction(obj client.Object, missing []int, digest string) podSetAction {
	return func(ctx context.Context) error {
		for _, i := range missing {
			if err := r.client.Create(ctx, r.podFor(obj, i, digest), client.FieldOwner(FieldOwner)); err != nil {
				return fmt.Errorf("create pod %s: %w", PodSetPodName(obj.GetName(), i), err)
			}
		}
		return nil
	}
}

// deletePodsAction returns the action that deletes the extra pods.
func (r *podSetReconciler) deletePodsAction(extra []*corev1.Pod) podSetAction {
	return func(ctx context.Context) error {
		for _, p := range extra {
			if err := r.client.Delete(ctx, p); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("delete pod %s: %w", p.Name, err)
			}
		}
		return nil
	}
}

// patchSuffixAction returns the action that patches the config suffix and in-place update state of the
// owned pods named in targets to digest, which restarts them in place.
func (r *podSetReconciler) patchSuffixAction(owned []*corev1.Pod, targets []string, digest string) podSetAction {
	byName := map[string]*corev1.Pod{}
	for _, p := range owned {
		byName[p.Name] = p
	}
	return func(ctx context.Context) error {
		for _, name := range targets {
			p := byName[name]
			orig := p.DeepCopy()
			if p.Annotations == nil {
				p.Annotations = map[string]string{}
			}
			state, err := json.Marshal(inPlaceUpdateState{ConfigSuffix: digest, RestartCount: podRestartCount(p)})
			if err != nil {
				return err
			}
			p.Annotations[AnnotationConfigSuffix] = digest
			p.Annotations[AnnotationInPlaceUpdateState] = string(state)
			// Optimistic lock: the recorded restart count must be the pod's current one.
			if err := r.client.Patch(ctx, p, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}),
				client.FieldOwner(FieldOwner)); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("patch config suffix of pod %s: %w", name, err)
			}
			log.FromContext(ctx).Info("config suffix patched: in-place restart", "pod", name, "suffix", digest)
		}
		return nil
	}
}

// predecessorsSettled reports whether the components that restart before obj's are Ready again on the new
// revision: nothing for a LogSet; the LogSet for a DNSet; the LogSet and every DNSet of the namespace that
// depends on it for a ProxySet. "On the new revision" means on the digest this operator renders for them.
func (r *podSetReconciler) predecessorsSettled(ctx context.Context, obj client.Object, logSet *mov1.LogSet,
	opts Options) (bool, error) {
	if logSet == nil {
		return true, nil
	}
	if !settledOn(&logSet.Status.PodSetStatus, logSet.Generation, ConfigDigest(renderFor(logSet, nil, opts))) {
		return false, nil
	}
	if _, ok := obj.(*mov1.ProxySet); !ok {
		return true, nil
	}
	dns := &mov1.DNSetList{}
	if err := r.client.List(ctx, dns, client.InNamespace(obj.GetNamespace())); err != nil {
		return false, err
	}
	for i := range dns.Items {
		dn := &dns.Items[i]
		if dn.Spec.Deps.LogSet != logSet.Name || !dn.DeletionTimestamp.IsZero() {
			continue
		}
		if !settledOn(&dn.Status.PodSetStatus, dn.Generation, ConfigDigest(renderFor(dn, logSet, opts))) {
			return false, nil
		}
	}
	return true, nil
}

// syncConfigMap creates the set's ConfigMap or, when it exists, merges the old keys still in use (the pods
// of the whole namespace are listed) into the desired data and updates it when that changed.
func (r *podSetReconciler) syncConfigMap(ctx context.Context, obj client.Object, rendered, digest string) error {
	desired := desiredConfigData(rendered, digest)
	_, _, _, component := podSetParts(obj)
	cm := &corev1.ConfigMap{}
	key := client.ObjectKey{Namespace: obj.GetNamespace(), Name: ConfigMapName(obj.GetName())}
	err := r.client.Get(ctx, key, cm)
	if apierrors.IsNotFound(err) {
		cm = &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{
				Name: key.Name, Namespace: key.Namespace,
				Labels:          map[string]string{LabelComponent: component, LabelInstance: obj.GetName()},
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(obj, r.gvk)},
			},
			Data: desired,
		}
		if err := r.client.Create(ctx, cm, client.FieldOwner(FieldOwner)); err != nil {
			return fmt.Errorf("create configmap %s: %w", key.Name, err)
		}
		return nil
	}
	if err != nil {
		return err
	}
	pods := &corev1.PodList{}
	if err := r.client.List(ctx, pods, client.InNamespace(obj.GetNamespace())); err != nil {
		return err
	}
	suffixes := make([]string, 0, len(pods.Items))
	for _, p := range pods.Items {
		suffixes = append(suffixes, p.Annotations[AnnotationConfigSuffix])
	}
	data, dropped := pruneConfigData(cm.Data, desired, suffixes)
	for _, k := range dropped {
		log.FromContext(ctx).Info(fmt.Sprintf("config key %s is not in use, will be deleted", k),
			"configMap", key.Name)
	}
	if maps.Equal(data, cm.Data) {
		return nil
	}
	cm.Data = data
	if err := r.client.Update(ctx, cm, client.FieldOwner(FieldOwner)); err != nil {
		return fmt.Errorf("update configmap %s: %w", key.Name, err)
	}
	return nil
}

// ownedPods lists the pods with the set's component and instance labels that the set controls.
func (r *podSetReconciler) ownedPods(ctx context.Context, obj client.Object) ([]*corev1.Pod, error) {
	_, _, _, component := podSetParts(obj)
	list := &corev1.PodList{}
	if err := r.client.List(ctx, list, client.InNamespace(obj.GetNamespace()),
		client.MatchingLabels{LabelComponent: component, LabelInstance: obj.GetName()}); err != nil {
		return nil, err
	}
	var out []*corev1.Pod
	for i := range list.Items {
		p := &list.Items[i]
		if metav1.IsControlledBy(p, obj) && p.DeletionTimestamp.IsZero() {
			out = append(out, p)
		}
	}
	return out, nil
}

// finalize deletes the set's pods and ConfigMap; done once no pod of the set is left.
func (r *podSetReconciler) finalize(ctx context.Context, obj client.Object) (bool, error) {
	_, _, _, component := podSetParts(obj)
	list := &corev1.PodList{}
	if err := r.client.List(ctx, list, client.InNamespace(obj.GetNamespace()),
		client.MatchingLabels{LabelComponent: component, LabelInstance: obj.GetName()}); err != nil {
		return false, err
	}
	left := 0
	for i := range list.Items {
		p := &list.Items[i]
		if !metav1.IsControlledBy(p, obj) {
			continue
		}
		left++
		if p.DeletionTimestamp.IsZero() {
			if err := r.client.Delete(ctx, p); client.IgnoreNotFound(err) != nil {
				return false, fmt.Errorf("delete pod %s: %w", p.Name, err)
			}
		}
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: obj.GetNamespace(), Name: ConfigMapName(obj.GetName())}}
	if err := r.client.Delete(ctx, cm); client.IgnoreNotFound(err) != nil {
		return false, fmt.Errorf("delete configmap %s: %w", cm.Name, err)
	}
	return left == 0, nil
}

// podFor builds ordinal pod i of the set: labels component and instance, the config-suffix annotation,
// a controller owner reference to the set, and one container that runs start.sh from the ConfigMap with
// the suffix from the downward API.
func (r *podSetReconciler) podFor(obj client.Object, i int, digest string) *corev1.Pod {
	_, _, _, component := podSetParts(obj)
	name := PodSetPodName(obj.GetName(), i)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: obj.GetNamespace(),
			Labels:          map[string]string{LabelComponent: component, LabelInstance: obj.GetName()},
			Annotations:     map[string]string{AnnotationConfigSuffix: digest},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(obj, r.gvk)},
		},
		Spec: corev1.PodSpec{
			Hostname: name,
			Containers: []corev1.Container{{
				Name:    "main",
				Image:   podSetImage,
				Command: []string{"/bin/sh", ConfigMountPath + "/" + EntrypointKey},
				Env: []corev1.EnvVar{{Name: configSuffixEnv, ValueFrom: &corev1.EnvVarSource{
					FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['" + AnnotationConfigSuffix + "']"},
				}}},
				VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: ConfigMountPath}},
			}},
			Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{
				ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{
					Name: ConfigMapName(obj.GetName())}},
			}}},
		},
	}
}

// errNilClient is returned by Reconcile when the reconciler was neither given a Client nor set up.
var errNilClient = errors.New("matrixone: reconciler has no Client (set it, or call SetupWithManager)")
