package controlplane

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
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

// DefaultStartTimeout bounds a control plane's start when envtest's ControlPlaneStartTimeout is not set.
const DefaultStartTimeout = 60 * time.Second

// Plane is a started control plane. Stop is safe to call more than once and from several goroutines.
type Plane struct {
	// Config reaches the API server as an administrator, without gzip (loopback gains nothing from it).
	Config *rest.Config
	env    *envtest.Environment
	mu     sync.Mutex
	pids   []int
	// seen holds the command names of the processes the plane started (kube-apiserver, etcd).
	seen map[string]bool
	// kcm is the plane's kube-controller-manager, when it runs one.
	kcm *kcm
	// dir is the plane's working directory (planeDirPrefix): etcd's data, the API server's certificates and
	// keys, kube-controller-manager's kubeconfig and serving certificate, envtest's webhook serving certificates
	// (moved in once the start returns). It is in the pid file from before
	// the first process starts, for whoever cleans up after a test process that could not.
	dir  string
	once sync.Once
	err  error
	done chan struct{}
	// interrupted is closed by the signal handler: a Start still in progress stops what it started.
	interrupted chan struct{}
}

// startMu serialises starts, so the processes that appear during one start are that plane's own.
var startMu sync.Mutex

// Start starts env (its BinaryAssetsDirectory defaults to AssetsDir) after killing control planes left by
// test processes that no longer exist. It first checks that the binaries answer the expected versions and
// that the temp directory is writable. The processes it starts are recorded as they appear, so a test process
// killed outright even mid-start leaves them to the next Start to kill. The start's bound is
// env.ControlPlaneStartTimeout (DefaultStartTimeout when zero), envtest's own retries included: past it Start
// gives up as soon as the binary it waits for is idle (under 2 % of a core and no thread runnable, in each of
// three windows of a twelfth of the bound, from 1 s to 5 s), or at StartStretch times the bound while it keeps
// working. Then it kills what it
// started and names the binary that did not come up. Start sets env.ControlPlaneStartTimeout to StartStretch
// times the bound, envtest's own bound for each binary. On SIGINT or SIGTERM it kills
// the control plane at once (SIGKILL: a second Ctrl-C may end the process before an orderly stop
// finishes), even while envtest is still starting, then runs onSignal (may be nil; the caller's own
// teardown); after SignalGrace the signal is re-raised with its default action.
//
// Errors, each one line that says what to do: binaries missing or of another version, an unwritable temp
// directory, a binary that did not come up in time, CRDs the API server refused, envtest failing otherwise.
func Start(env *envtest.Environment, onSignal func()) (*Plane, error) {
	if env.BinaryAssetsDirectory == "" {
		dir, err := AssetsDir()
		if err != nil {
			return nil, err
		}
		env.BinaryAssetsDirectory = dir
	}
	if err := CheckVersions(env.BinaryAssetsDirectory); err != nil {
		return nil, err
	}
	dir, err := makePlaneDir()
	if err != nil {
		return nil, err
	}
	if err := useDir(env, dir); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	if err := useAudit(env, dir); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	bound := env.ControlPlaneStartTimeout
	if bound <= 0 {
		bound = DefaultStartTimeout
	}
	env.ControlPlaneStartTimeout = StartStretch * bound
	ReapOrphans()
	startWatchdog()
	beatTestTimeout()
	startMu.Lock()
	defer startMu.Unlock()
	p := &Plane{env: env, dir: dir, seen: map[string]bool{}, done: make(chan struct{}), interrupted: make(chan struct{})}
	register(p)
	recordPlanes()
	p.watchSignals(onSignal)
	stopTracking := p.track(others(p))
	cfg, err := p.startWithin(bound)
	stopTracking()
	select {
	case <-p.interrupted:
		// A signal came while envtest was starting: the handler killed what was running then; kill what
		// came up since, and report the interruption.
		KillNow(p.children())
		_ = p.Stop()
		return nil, fmt.Errorf("ensemble: interrupted while envtest was starting")
	default:
	}
	if err != nil {
		_ = p.Stop()
		return nil, err
	}
	// Every client of the test process talks to the API server over loopback, where gzip saves no time
	// and costs CPU on both ends (about 4% of the scenario suite's test process under -race, and as much
	// of kube-apiserver's, compressing each watch stream).
	cfg.DisableCompression = true
	p.Config = cfg
	// envtest always makes the webhook serving certificates' directory (envtest-serving-certs-*) in the temp
	// directory, webhooks or not: move it into the plane's, which the watchdog and the next Start remove
	// after a SIGKILL (envtest's Stop removes it where LocalServingCertDir says).
	if wh := &env.WebhookInstallOptions; wh.LocalServingCertDir != "" && !strings.HasPrefix(wh.LocalServingCertDir, dir+string(filepath.Separator)) {
		moved := filepath.Join(dir, "webhook-serving-certs")
		if os.Rename(wh.LocalServingCertDir, moved) == nil {
			wh.LocalServingCertDir = moved
		}
	}
	recordPlanes()
	return p, nil
}

// StartStretch is how many times its bound a control plane's start may last while the binary it waits for
// is still working. On a machine loaded far past its cores a kube-apiserver that uses CPU is slow, not hung:
// at a load of 20 on 2 cores its start took more than 60 s.
const StartStretch = 5

// idleShare is the share of one core under which a starting binary counts as idle over a stall window: a
// binary that waits on what never comes uses next to none (a few polls), one that starts uses far more
// even when the machine gives it a tenth of a core.
const idleShare = 50 // one fiftieth, 2 %

// idleWindows is how many stall windows in a row the binary a start waits for must be idle to be given up:
// envtest itself works between etcd's start and kube-apiserver's (certificates, flags) while etcd idles.
const idleWindows = 3

// stallWindow is how long the binary a start waits for is watched for CPU use before it is called idle:
// a twelfth of the bound, from 1 s to 5 s.
func stallWindow(bound time.Duration) time.Duration {
	return min(max(bound/12, time.Second), 5*time.Second)
}

// startWithin runs env.Start. Once bound has passed it gives up as soon as the binary it waits for (etcd,
// then kube-apiserver once started) did not work (activity.worked) in each of the last idleWindows stall
// windows, or, while it keeps working, once StartStretch times bound has passed. Then it kills every process the plane started (and
// keeps killing those envtest's retries start) until env.Start returns, and names the binary that did not
// come up. env.ControlPlaneStartTimeout must already be StartStretch times bound, so envtest itself does
// not give up first.
func (p *Plane) startWithin(bound time.Duration) (*rest.Config, error) {
	type result struct {
		cfg *rest.Config
		err error
	}
	ch := make(chan result, 1)
	go func() {
		cfg, err := p.env.Start()
		ch <- result{cfg, err}
	}()
	began := time.Now()
	window := stallWindow(bound)
	ticker := time.NewTicker(window)
	defer ticker.Stop()
	var act activity
	var stuck, other string
	idle, idleFor := false, 0
	for {
		select {
		case r := <-ch:
			if r.err != nil {
				return nil, p.startError(r.err)
			}
			return r.cfg, nil
		case <-ticker.C:
		}
		// envtest starts etcd, waits until it serves, then starts kube-apiserver.
		stuck, other = "etcd", "kube-apiserver had not been started"
		p.mu.Lock()
		if p.seen["kube-apiserver"] {
			stuck, other = "kube-apiserver", "etcd had come up"
		}
		p.mu.Unlock()
		if act.worked(p.named(stuck), window) {
			idleFor = 0
		} else {
			idleFor++
		}
		took := time.Since(began)
		if took < bound {
			continue
		}
		if idle = idleFor >= idleWindows; idle || took >= StartStretch*bound {
			break
		}
	}
	for {
		KillNow(p.children())
		select {
		case <-ch:
			if idle {
				return nil, fmt.Errorf("ensemble: %s (%s) did not come up within %s and was idle over its last %s (%s); it was killed: check that the binary is a real %s, or rebuild it with `make envtest-assets`",
					stuck, binaryPath(stuck, p.env.BinaryAssetsDirectory), time.Since(began).Round(time.Second), (idleWindows * window).Round(10*time.Millisecond), other, stuck)
			}
			return nil, fmt.Errorf("ensemble: %s (%s) did not come up within %s, %d times the start bound %s, though it was still working (%s); it was killed: the machine is too loaded, so run fewer test processes at once or raise suite.Options.StartTimeout",
				stuck, binaryPath(stuck, p.env.BinaryAssetsDirectory), StartStretch*bound, StartStretch, bound, other)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// named returns the plane's processes whose command name is name.
func (p *Plane) named(name string) []int {
	var out []int
	for _, pid := range p.children() {
		if comm(pid) == name {
			out = append(out, pid)
		}
	}
	return out
}

// activity tells a starting plane that works from one that waits on what never comes.
type activity struct {
	// ticks is the CPU time each process used by the last call of worked, in clock ticks.
	ticks map[int]int64
}

// worked reports whether the processes pids (those not running are skipped) worked since the last call, a
// window ago: they used at least 2 % of a core over it (2 clock ticks at least), or one of their threads is
// runnable or in disk wait now. A process the machine starves of CPU uses little but stays runnable.
func (a *activity) worked(pids []int, window time.Duration) bool {
	now, used, busy := map[int]int64{}, int64(0), false
	for _, pid := range pids {
		st, ok := readStat(pid)
		if !ok || !st.isRunningPlane() {
			continue
		}
		now[pid] = st.ticks
		if before, seen := a.ticks[pid]; seen && st.ticks >= before {
			used += st.ticks - before
		} else {
			used += st.ticks // a new process, or one that made an exec and began its count anew
		}
		busy = busy || threadRunnable(pid)
	}
	a.ticks = now
	return busy || time.Duration(used)*tick >= max(window/idleShare, 2*tick)
}

// startError turns envtest's start error into one line that says what to do.
func (p *Plane) startError(err error) error {
	msg := strings.ReplaceAll(err.Error(), "\n", " ")
	switch {
	case strings.Contains(msg, "waiting for CRDs to appear as API resources"):
		return fmt.Errorf("ensemble: the API server accepted the CRDs but did not serve them within %s: %s (a loaded machine: raise suite.Options.StartTimeout)", p.env.CRDInstallOptions.MaxTime, msg)
	case strings.Contains(msg, "CRD") || strings.Contains(msg, "CustomResourceDefinition"):
		return fmt.Errorf("ensemble: the API server refused a CRD: %s: fix the CRD it names (run `make generate` for generated ones)", msg)
	default:
		return fmt.Errorf("ensemble: envtest did not start with binaries from %s: %s (rebuild them with `make envtest-assets`)", p.env.BinaryAssetsDirectory, msg)
	}
}

// makePlaneDir makes a plane's working directory under the temp directory, named after this process
// (planeDirPrefix) so that the next Start can tell it is stale once this process is gone.
func makePlaneDir() (string, error) {
	dir, err := os.MkdirTemp("", planeDirPrefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return "", fmt.Errorf("ensemble: cannot create envtest's working directories under %s (TMPDIR): %v: point TMPDIR at a writable directory", os.TempDir(), err)
	}
	return dir, nil
}

// useDir points etcd's data directory and the API server's certificate directory of env at
// subdirectories of dir, unless the caller chose them. Errors: a subdirectory that cannot be made.
func useDir(env *envtest.Environment, dir string) error {
	if env.ControlPlane.Etcd == nil {
		env.ControlPlane.Etcd = &envtest.Etcd{}
	}
	for sub, d := range map[string]*string{"etcd": &env.ControlPlane.Etcd.DataDir, "kube-apiserver": &env.ControlPlane.GetAPIServer().CertDir} {
		if *d != "" {
			continue
		}
		if err := os.Mkdir(filepath.Join(dir, sub), 0o700); err != nil {
			return fmt.Errorf("ensemble: cannot create envtest's working directories: %v: point TMPDIR at a writable directory", err)
		}
		*d = filepath.Join(dir, sub)
	}
	return nil
}

func (p *Plane) children() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]int(nil), p.pids...)
}

// track records, every 10 ms until the returned func is called, the control-plane children of this process
// that are not in skip (other planes' processes) as the plane's own, and writes them to the pid file.
func (p *Plane) track(skip map[int]bool) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	scan := func() {
		changed := false
		p.mu.Lock()
		for _, pid := range ChildControlPlanes() {
			if !skip[pid] && !contains(p.pids, pid) {
				p.pids = append(p.pids, pid)
				p.seen[comm(pid)] = true
				changed = true
			}
		}
		p.mu.Unlock()
		if changed {
			recordPlanes()
		}
	}
	go func() {
		defer close(done)
		for {
			scan()
			select {
			case <-quit:
				scan()
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	return func() { close(quit); <-done }
}

func contains(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// Stop stops kube-controller-manager (when it runs) and envtest, kills whatever of this plane's processes
// outlived that, and returns once they are gone. Another plane of the same process is left alone. Errors: envtest's.
func (p *Plane) Stop() error {
	p.once.Do(func() {
		p.stopKCM()
		if err := p.env.Stop(); err != nil && !errors.Is(err, os.ErrProcessDone) {
			p.err = fmt.Errorf("ensemble: stopping envtest: %w", err)
		}
		// envtest stops its own processes; kill any it missed.
		KillAll(p.children())
		_ = os.RemoveAll(p.dir)
		unregister(p)
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
			KillNow(p.children())
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

// The planes of this process, for the pid file (the union of their processes) and for telling one plane's
// processes from another's.
var (
	planesMu sync.Mutex
	planes   = map[*Plane]bool{}
)

func register(p *Plane) {
	planesMu.Lock()
	planes[p] = true
	planesMu.Unlock()
}

func unregister(p *Plane) {
	planesMu.Lock()
	delete(planes, p)
	planesMu.Unlock()
	recordPlanes()
}

// others returns the processes of every plane of this process but p.
func others(p *Plane) map[int]bool {
	planesMu.Lock()
	defer planesMu.Unlock()
	out := map[int]bool{}
	for q := range planes {
		if q != p {
			for _, pid := range q.children() {
				out[pid] = true
			}
		}
	}
	return out
}

// recordPlanes writes the processes and working directories of every plane of this process to its pid
// file, or removes the file (and the pid directory, when empty) when there are none.
func recordPlanes() {
	planesMu.Lock()
	var pids []int
	var dirs []string
	for q := range planes {
		pids = append(pids, q.children()...)
		dirs = append(dirs, q.dir)
	}
	planesMu.Unlock()
	path := filepath.Join(pidDir(), fmt.Sprint(os.Getpid()))
	if len(pids) == 0 && len(dirs) == 0 {
		_ = os.Remove(path)
		// The directory too, once no test process has a file there (Remove refuses a non-empty one), so a
		// passing run leaves nothing in TMPDIR.
		_ = os.Remove(pidDir())
		return
	}
	var b strings.Builder
	for _, pid := range pids {
		fmt.Fprintln(&b, pid)
	}
	for _, d := range dirs {
		if d != "" {
			fmt.Fprintln(&b, "dir:"+d)
		}
	}
	_ = os.MkdirAll(pidDir(), 0o755)
	_ = os.WriteFile(path, []byte(b.String()), 0o644)
}
