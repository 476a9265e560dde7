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

// SignalGrace is how long the test process may go on after a SIGINT or SIGTERM before the signal is
// re-raised with its default action: longer than Ginkgo's own 30 s interrupt grace period, so Ginkgo always
// gets to run its cleanup and write its reports first.
const SignalGrace = 45 * time.Second

// Plane is a started control plane. Stop is safe to call more than once and from several goroutines.
type Plane struct {
	// Config reaches the API server as an administrator.
	Config *rest.Config
	env    *envtest.Environment
	mu     sync.Mutex
	pids   []int
	once   sync.Once
	err    error
	done   chan struct{}
	// interrupted is closed by the signal handler: a Start still in progress stops what it started.
	interrupted chan struct{}
}

// Start starts env (its BinaryAssetsDirectory defaults to AssetsDir) after killing control planes left by
// test processes that no longer exist, and records the processes it started. On SIGINT or SIGTERM it kills
// the control plane at once (SIGKILL: a second Ctrl-C may end the process before an orderly stop finishes),
// even while envtest is still starting, then runs onSignal (may be nil; the caller's own teardown); after
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
	p := &Plane{env: env, done: make(chan struct{}), interrupted: make(chan struct{})}
	p.watchSignals(onSignal)
	cfg, err := env.Start()
	p.mu.Lock()
	p.pids = RecordChildren()
	p.mu.Unlock()
	select {
	case <-p.interrupted:
		// A signal came while envtest was starting: the handler killed what was running then; kill what
		// came up since, and report the interruption.
		KillNow(append(p.children(), ChildControlPlanes()...))
		_ = p.Stop()
		return nil, fmt.Errorf("ensemble: interrupted while envtest was starting")
	default:
	}
	if err != nil {
		_ = p.Stop()
		return nil, fmt.Errorf("ensemble: envtest did not start with binaries from %s: %w (rebuild them with `make envtest-assets`)", env.BinaryAssetsDirectory, err)
	}
	p.Config = cfg
	return p, nil
}

func (p *Plane) children() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]int(nil), p.pids...)
}

// Stop stops envtest and kills whatever of kube-apiserver and etcd outlived that. Errors: envtest's.
func (p *Plane) Stop() error {
	p.once.Do(func() {
		if err := p.env.Stop(); err != nil {
			p.err = fmt.Errorf("ensemble: stopping envtest: %w", err)
		}
		// envtest stops its own processes; kill any it missed, including ones it had not told us about.
		KillAll(append(p.children(), ChildControlPlanes()...))
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
			// Kill the control plane at once: a second Ctrl-C may end the process before an orderly stop
			// would have finished, and an interrupted run needs no graceful shutdown of etcd.
			close(p.interrupted)
			KillNow(append(p.children(), ChildControlPlanes()...))
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
