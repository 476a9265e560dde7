package suite

import (
	"context"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/ensembletest/ensemble/suite/perturb"
)

// readLog keeps the reads the managers made, by namespace, for the explore records of unperturbed runs
// (perturb.Record.Reads), from which make explore prunes the points whose effect no read could tell apart.
// It exists only while ENSEMBLE_EXPLORE asks for records and ENSEMBLE_BASELINE names none (an unperturbed
// run): otherwise the Suite's readLog is nil and nothing records a read. See docs/architecture.md §3
// Perturbation.
type readLog struct {
	mu sync.Mutex
	// byNS holds each namespace's reads in the order they returned; "" holds the reads of cluster-scoped
	// objects and the lists across all namespaces.
	byNS map[string][]read
}

// read is one Get or List a manager made: who (manager, and controller or runnable when made in one), of
// what (a kind and a name, or a kind alone for a List), in which namespace, and when it returned.
type read struct {
	manager, controller string
	kind, namespace     string
	name                string
	at                  time.Time
}

// readLogCap bounds one namespace's reads: past it the older half goes (a namespace no case records,
// such as the cluster's own, would otherwise grow for the whole run).
const readLogCap = 200_000

func newReadLog() *readLog { return &readLog{byNS: map[string][]read{}} }

// add notes one read made on ctx by manager; safe on a nil log (reads are not recorded). A kind that is
// empty (an object the scheme cannot name) is not noted.
func (l *readLog) add(ctx context.Context, manager, kind, namespace, name string) {
	if l == nil || kind == "" {
		return
	}
	r := read{manager: manager, kind: kind, namespace: namespace, name: name, at: time.Now()}
	if p := passFrom(ctx); p != nil {
		r.controller = p.Controller
	} else {
		r.controller = runnableFrom(ctx)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	rs := append(l.byNS[namespace], r)
	if len(rs) > readLogCap {
		rs = append([]read(nil), rs[len(rs)/2:]...)
	}
	l.byNS[namespace] = rs
}

// take returns the reads of namespace ns, and the cluster-wide ones (cluster-scoped objects, lists of all
// namespaces), made from since on, as perturb.RecordReads in the order they returned, with the namespace
// written as perturb.CaseNamespace in names; it forgets ns's. nil on a nil log.
func (l *readLog) take(ns string, since time.Time) []perturb.RecordRead {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	own, cluster := l.byNS[ns], append([]read(nil), l.byNS[""]...)
	delete(l.byNS, ns)
	l.mu.Unlock()
	out := make([]perturb.RecordRead, 0, len(own))
	i, j := 0, 0
	// Both slices are in the order the reads returned: merge them.
	for i < len(own) || j < len(cluster) {
		var r read
		if j >= len(cluster) || i < len(own) && own[i].at.Before(cluster[j].at) {
			r, i = own[i], i+1
		} else {
			r, j = cluster[j], j+1
		}
		if r.at.Before(since) {
			continue
		}
		reader := r.manager
		if r.controller != "" {
			reader += "/" + r.controller
		}
		out = append(out, perturb.RecordRead{Reader: reader, Object: r.kind + "/" + perturb.RelativeName(r.name, ns), At: r.at})
	}
	return out
}

// readingCache is a manager's cache that notes every Get and List made through it (the manager's client
// reads its cached kinds through it) in the suite's readLog.
type readingCache struct {
	cache.Cache
	log     *readLog
	manager string
	scheme  *runtime.Scheme
}

// Get reads as the cache does and notes the read.
func (c *readingCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	err := c.Cache.Get(ctx, key, obj, opts...)
	c.log.add(ctx, c.manager, readKind(obj, c.scheme), key.Namespace, key.Name)
	return err
}

// List reads as the cache does and notes the read of the list's kind in its namespace ("" for all).
func (c *readingCache) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	err := c.Cache.List(ctx, list, opts...)
	lo := (&client.ListOptions{}).ApplyOptions(opts)
	c.log.add(ctx, c.manager, strings.TrimSuffix(readKind(list, c.scheme), "List"), lo.Namespace, "")
	return err
}

// readKind is obj's kind as scheme names it (or as obj says, for an unstructured one); "" when neither can.
func readKind(obj runtime.Object, scheme *runtime.Scheme) string {
	gvk, err := apiutil.GVKForObject(obj, scheme)
	if err != nil {
		return ""
	}
	return gvk.Kind
}

// readingCacheFunc is a cache.NewCacheFunc that builds the cache as controller-runtime does and notes its
// reads as manager's in log.
func readingCacheFunc(log *readLog, manager string, scheme *runtime.Scheme) cache.NewCacheFunc {
	return func(cfg *rest.Config, o cache.Options) (cache.Cache, error) {
		c, err := cache.New(cfg, o)
		if err != nil {
			return nil, err
		}
		return &readingCache{Cache: c, log: log, manager: manager, scheme: scheme}, nil
	}
}
