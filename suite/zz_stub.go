package suite

// TEMPORARY: replaced by the hold and leader branches at merge.

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
)

type holds struct{}

var _ = map[string]External(nil)

func newHolds(*runtime.Scheme) *holds                      { return &holds{} }
func (h *holds) wrapCache(o cache.Options) cache.Options   { return o }
func (h *holds) hold(kind, ns, name string, c bool) func() { return func() {} }

type External struct {
	Name string
	Down func(namespace string, on bool)
	Slow func(namespace string, latency time.Duration)
}

func (s *Suite) external(name string) (External, error) {
	return External{}, fmt.Errorf("no externals yet")
}
