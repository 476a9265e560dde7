// Package passcount counts reconcile passes per controller and request from controller-runtime's own log,
// for package tests that run controllers on a plain manager (no harness): controller-runtime logs
// "Reconciling" at verbosity 5, with the controller and the request's name, before every pass.
package passcount

import (
	"sync"

	"github.com/go-logr/logr"
)

// Counter counts passes; its Logger goes into ctrl.Options.Logger. Safe for concurrent use.
type Counter struct {
	mu sync.Mutex
	n  map[string]int
}

// Logger returns a logger that counts the passes it is told of and discards everything else.
func (c *Counter) Logger() logr.Logger { return logr.New(&sink{c: c}) }

// Get returns how many passes controller has run for requests named name (in any namespace).
func (c *Counter) Get(controller, name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[controller+"/"+name]
}

func (c *Counter) add(controller, name string) {
	c.mu.Lock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[controller+"/"+name]++
	c.mu.Unlock()
}

type sink struct {
	c  *Counter
	kv []any
}

func (s *sink) Init(logr.RuntimeInfo)        {}
func (s *sink) Enabled(level int) bool       { return level <= 5 }
func (s *sink) Error(error, string, ...any)  {}
func (s *sink) WithName(string) logr.LogSink { return s }
func (s *sink) WithValues(kv ...any) logr.LogSink {
	return &sink{c: s.c, kv: append(append([]any(nil), s.kv...), kv...)}
}

func (s *sink) Info(_ int, msg string, kv ...any) {
	if msg != "Reconciling" {
		return
	}
	var controller, name string
	all := append(append([]any(nil), s.kv...), kv...)
	for i := 0; i+1 < len(all); i += 2 {
		switch all[i] {
		case "controller":
			controller, _ = all[i+1].(string)
		case "name":
			name, _ = all[i+1].(string)
		}
	}
	s.c.add(controller, name)
}
