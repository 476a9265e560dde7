package suite

import (
	"context"
	"fmt"
	"reflect"
	"runtime"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// runnableCtxKey carries, in a Runnable's context, the name its writes are recorded under.
type runnableCtxKey struct{}

// runnableFrom returns the name of the Runnable a context was handed to, or "".
func runnableFrom(ctx context.Context) string {
	name, _ := ctx.Value(runnableCtxKey{}).(string)
	return name
}

// namedRunnable is a Runnable the operator added that is no controller (a scheduler, a cache warmer, a
// loop of its own): it starts the operator's with a context that names it, so every write made on a context
// derived from that one is recorded with the runnable's name as its Controller, and, when its manager is
// gated, refused unless its object belongs to an admitted Case (see recordingTransport). It is stopped and
// started again with its manager, by restart points too.
type namedRunnable struct {
	manager.Runnable
	name string
}

func (r *namedRunnable) Start(ctx context.Context) error {
	return r.Runnable.Start(context.WithValue(ctx, runnableCtxKey{}, r.name))
}

// namedElectionRunnable is a namedRunnable that says whether it needs leader election, as the operator's does.
type namedElectionRunnable struct {
	*namedRunnable
	election manager.LeaderElectionRunnable
}

func (r *namedElectionRunnable) NeedLeaderElection() bool { return r.election.NeedLeaderElection() }

// nameRunnable returns r wrapped so its writes carry a name, or r itself when the manager files it by a
// type the wrapper would hide (a cache, a webhook or HTTP server, a runnable with a warm-up).
func nameRunnable(r manager.Runnable) manager.Runnable {
	switch r.(type) {
	case interface{ GetCache() cache.Cache }, webhook.Server, *manager.Server, interface{ Warmup(context.Context) error }:
		return r
	}
	n := &namedRunnable{Runnable: r, name: runnableName(r)}
	if e, ok := r.(manager.LeaderElectionRunnable); ok {
		return &namedElectionRunnable{namedRunnable: n, election: e}
	}
	return n
}

// runnableName names r by its type ("scheduler.Scheduler"), or, for a manager.RunnableFunc, by its
// function ("pkg.(*T).run").
func runnableName(r manager.Runnable) string {
	if f, ok := r.(manager.RunnableFunc); ok {
		name := runtime.FuncForPC(reflect.ValueOf(f).Pointer()).Name()
		return strings.TrimSuffix(name[strings.LastIndex(name, "/")+1:], "-fm")
	}
	return strings.TrimPrefix(fmt.Sprintf("%T", r), "*")
}
