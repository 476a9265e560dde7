package controlplane

import (
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// SignalGrace is how long the test process may go on after a SIGINT or SIGTERM (for a test framework such
// as Ginkgo to run its cleanup and write its reports) before the signal is re-raised with its default
// action.
const SignalGrace = 10 * time.Second

// Plane is a started control plane. Stop is safe to call more than once and from several goroutines.
type Plane struct {
	// Config reaches the API server as an administrator.
	Config *rest.Config
	env    *envtest.Environment
	pids   []int
	once   sync.Once
	err    error
	done   chan struct{}
}

// Start starts env (its BinaryAssetsDirectory defaults to AssetsDir) after killing control planes left by
// test processes that no longer exist, records the processes it started, and stops them on SIGINT or
// SIGTERM: first onSignal (may be nil; the caller's own teardown), then the control plane; after
// SignalGrace the signal is re-raised with its default action. Errors: the binaries are missing (one line
// naming `make envtest-assets`), or envtest did not start (whatever it started is stopped).
func Start(env *envtest.Environment, onSignal func()) (*Plane, error) {
	if env.BinaryAssetsDirectory == "" {
		dir, err := AssetsDir()
		if err != nil {
			return nil, err
		}
		env.BinaryAssetsDirectory = dir
	}
	ReapOrphans()
	p := &Plane{env: env, done: make(chan struct{})}
	p.watchSignals(onSignal)
	cfg, err := env.Start()
	p.pids = RecordChildren()
	if err != nil {
		_ = p.Stop()
		return nil, fmt.Errorf("ensemble: envtest did not start with binaries from %s: %w (rebuild them with `make envtest-assets`)", env.BinaryAssetsDirectory, err)
	}
	p.Config = cfg
	return p, nil
}

// Stop stops envtest and kills whatever of kube-apiserver and etcd outlived that. Errors: envtest's.
func (p *Plane) Stop() error {
	p.once.Do(func() {
		if err := p.env.Stop(); err != nil {
			p.err = fmt.Errorf("ensemble: stopping envtest: %w", err)
		}
		KillAll(p.pids)
		ForgetChildren()
		close(p.done)
	})
	return p.err
}

func (p *Plane) watchSignals(onSignal func()) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		select {
		case sig := <-ch:
			if onSignal != nil {
				onSignal()
			}
			_ = p.Stop()
			time.AfterFunc(SignalGrace, func() {
				signal.Stop(ch)
				signal.Reset(sig)
				_ = syscall.Kill(os.Getpid(), sig.(syscall.Signal))
			})
		case <-p.done:
			signal.Stop(ch)
		}
	}()
}
