package suite

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/ensembletest/ensemble/internal/controlplane"
	"github.com/ensembletest/ensemble/suite/perturb"
)

// defaultRequeueClamp is Options.RequeueClamp's default.
const defaultRequeueClamp = 50 * time.Millisecond

// defaultRequeueCompressAbove is Options.RequeueCompressAbove's default: 1 s. A requeue of a second or less is a
// deliberate short deferral (cluster-api answers a second reconcile of an object within a second with one),
// and compressed to 50 ms it comes back about 20 times for nothing (3,281 passes in a 69 s cluster-api spec,
// 95% of them turned away before its reconciler); left as asked it costs a spec at most a second. The delays
// compression is for, resyncs and polls of seconds to hours, are all above it.
const defaultRequeueCompressAbove = time.Second

// The Lease timings of a manager with LeaderElection. A follower tries to acquire the Lease every
// leaseRetryPeriod (and the leader renews it as often), so it takes over within about that once the leader's
// Stop releases it: 250 ms, where controller-runtime waits 2 s. A leader that cannot renew within
// leaseRenewDeadline stops leading, and its manager stops with "leader election lost", which fails the run,
// so the deadline and the lease keep controller-runtime's 10 s and 15 s: a 3 s deadline was lost by the
// sentinel's manager on a machine whose two cores were saturated. A Lease left unrenewed for leaseDuration (a
// holder gone without releasing it) may be taken.
const (
	leaseDuration      = 15 * time.Second
	leaseRenewDeadline = 10 * time.Second
	leaseRetryPeriod   = 250 * time.Millisecond
)

// Options configures Boot.
type Options struct {
	// CRDDirectoryPaths are directories (or files) of CRD YAML to install; each must exist and hold at least
	// one CRD, relative paths are resolved against the working directory.
	CRDDirectoryPaths []string
	// CRDs are CRDs to install given as objects (a dependency's CRDs built in Go, say), beside those of
	// CRDDirectoryPaths; each non-nil, named, and named once. envtest installs copies, so the objects are
	// not changed. Neither CRDs nor CRDDirectoryPaths is required.
	CRDs []*apiextensionsv1.CustomResourceDefinition
	// Scheme knows every kind the managers, the Cases and WatchKinds use. Required.
	Scheme *runtime.Scheme
	// Managers are started in order once envtest is up; each name must be unique and non-empty.
	Managers []ManagerOptions
	// WatchKinds are the kinds the event stream watches in every namespace (prototypes such as
	// &corev1.Pod{}); quiescence and Case cleanup look at these kinds.
	WatchKinds []client.Object
	// RequeueClamp is what requeue compression shortens an asked RequeueAfter to: one above both
	// RequeueClamp and RequeueCompressAbove is handed to controller-runtime as RequeueClamp (Pass.Asked keeps
	// the asked value, Pass.RequeueAfter the handed one). Default 50 ms; negative disables compression.
	RequeueClamp time.Duration
	// RequeueCompressAbove is the longest asked RequeueAfter that requeue compression leaves as asked: a
	// short deliberate deferral (a per-object rate limit's "come back in 300 ms") is handed to
	// controller-runtime unchanged, and only longer delays are shortened to RequeueClamp. Default 1 s (see
	// defaultRequeueCompressAbove); negative compresses every delay above RequeueClamp.
	RequeueCompressAbove time.Duration
	// Pins is the defect catalog Case.KnownDefect checks references against; without it every pin fails.
	// A pins.Catalog also lists its entries, so `ensemble defect-matrix` can flip each in turn.
	Pins PinCatalog
	// Dumpers add sections to every failure dump (a fake's log for the namespace, for instance).
	Dumpers []Dumper
	// ArtifactsDir receives failure dumps and timelines (a failed spec's, and those ENSEMBLE_TIMELINE asks
	// for: 1 for every spec, or a regexp of spec names). Default: $ENSEMBLE_ARTIFACTS, else <os temp
	// dir>/ensemble-artifacts.
	ArtifactsDir string
	// StartTimeout bounds the control plane's whole start (envtest's retries included), the garbage
	// collector's first collection and each manager's cache sync. Default 60 s. Past it a control plane's
	// start goes on while the binary it waits for keeps using CPU (a loaded machine), up to 5 times as long.
	StartTimeout time.Duration
	// StopTimeout bounds Stop: managers, then kube-apiserver and etcd. Default 20 s.
	StopTimeout time.Duration
	// CleanupTimeout bounds how long a Case's cleanup waits for the controllers to delete what the spec
	// left; past it, remaining finalizers are removed so the namespace is empty either way. Default 30 s.
	CleanupTimeout time.Duration
	// Logger receives controller-runtime's logs. Default: discarded, unless ENSEMBLE_LOG=1 (then stderr).
	Logger *logr.Logger
	// KubeControllers are the kube-controller-manager controllers run beside envtest (its --controllers
	// flag, e.g. "garbage-collector-controller"). nil runs the default set: garbage collection, namespace
	// deletion, deployments, replicasets, statefulsets, jobs, cronjobs, endpoints, endpointslices,
	// disruption budgets, ttl-after-finished and serviceaccounts. An empty, non-nil slice runs no
	// kube-controller-manager. Boot returns once the garbage collector (when it runs) collects.
	KubeControllers []string
	// Externals are the systems outside Kubernetes that the fakes play (a topology store, a registry), which
	// perturbation points take down or slow by Name; each Name unique, each Down and Slow set.
	Externals []External
	// Webhooks are the operator's admission webhook configurations, served by the first manager whose
	// Register registers a webhook handler (docs/architecture.md §3 Webhooks).
	Webhooks WebhookOptions
}

// ManagerOptions describes one controller-runtime Manager: one operator instance.
type ManagerOptions struct {
	// Name labels the manager's writes and passes ("name/controller"); unique and non-empty.
	Name string
	// Scheme for this manager; default Options.Scheme.
	Scheme *runtime.Scheme
	// Cache options, e.g. DefaultNamespaces to scope the manager to one namespace as production would.
	Cache cache.Options
	// Client options of the manager's client, as the operator's main sets them (cluster-api's
	// setup.ManagerClientOptions, say: objects read uncached, a default field owner). A default FieldOwner is
	// recorded as each write's field owner when the write names none. HTTPClient must stay nil: the harness
	// builds each manager's HTTP client from its own rest config (User-Agent, no gzip, the
	// bookkeeping of open watches Stop names when the control plane does not stop). Cache.Reader must stay
	// nil too: each manager instance (a restart point's and a batch run's fresh ones included) reads through
	// a copy of Cache whose Reader controller-runtime sets to that instance's cache; Cache itself is left
	// as given.
	Client client.Options
	// Controller is the controller configuration the manager's controllers default to, as the operator's
	// main sets it (a priority queue, concurrency, a cache sync timeout). The harness overrides two fields:
	// SkipNameValidation is always true (one operator's controllers run in several managers of one process,
	// and controller-runtime refuses a controller name twice per process), and CacheSyncTimeout is at most
	// Options.StartTimeout (zero or longer becomes it), so a source that cannot sync, a watched kind with no
	// CRD, fails the manager within the start timeout instead of after main's minutes.
	Controller config.Controller
	// Ungated runs the manager wired as in production: its requests are recorded but never refused by the
	// gate. Fakes run ungated; so does a second operator instance whose own scoping is under test.
	Ungated bool
	// UserAgent for the manager's API requests; default "ensemble-<Name>/v0". The API server names an
	// unnamed field manager after the part before the first "/".
	UserAgent string
	// LeaderElection turns leader election on, with LeaderElectionID as the Lease name in
	// LeaderElectionNamespace (default "default"), on the harness's short lease timings (leaseDuration,
	// leaseRenewDeadline, leaseRetryPeriod: 15 s, 10 s, 250 ms). The manager's controllers start only once it
	// leads (Manager.Elected); Manager.Stop releases the Lease, so another instance on it takes over within
	// about 250 ms.
	LeaderElection          bool
	LeaderElectionID        string
	LeaderElectionNamespace string
	// Register sets up the operator on mgr exactly as its main does, with its own unmodified
	// SetupWithManager calls. mgr is the real manager but for one method, and every client built on its
	// rest.Config (GetClient, a clientset on GetConfig) has its writes recorded. Add wraps every controller
	// controller-runtime's builder makes (gate, pass accounting, requeue compression) under the name the
	// builder gives it. ctx is cancelled when this manager instance stops (Manager.Stop, Suite.Stop, a
	// restart point, or a failed start), so what the operator starts on it outside the manager (a cluster
	// cache's watches, say) ends with the manager; pass it where the operator's main passes its signal
	// context. Each instance a restart point starts gets a fresh ctx. Required.
	Register func(ctx context.Context, mgr manager.Manager) error
}

// Suite is one booted envtest with its managers, recorder, event stream and gate. Boot makes it; Stop ends it.
type Suite struct {
	// Config reaches the API server as an administrator.
	Config *rest.Config
	// Client is a direct (uncached, unrecorded) administrator client.
	Client client.Client
	// EnvtestBoot is how long kube-apiserver and etcd took to start and the CRDs to install.
	EnvtestBoot time.Duration
	// KubeControllersReady is how long kube-controller-manager took to start and its garbage collector to
	// collect a first dependent; zero when it does not run.
	KubeControllersReady time.Duration
	// Ready is how long Boot took in all, managers started and caches synced.
	Ready time.Duration

	scheme       *runtime.Scheme
	watchKinds   []client.Object
	requeueClamp time.Duration
	// requeueCompressAbove is Options.RequeueCompressAbove (negative: compress every delay above the clamp).
	requeueCompressAbove time.Duration
	pins                 PinCatalog
	dumpers              []Dumper
	artifactsDir         string
	// evidenceAsked is false when artifactsDir is the default nobody chose; written then lists the pin
	// evidence files Stop removes, so a passing run leaves nothing in the temp dir.
	evidenceAsked  bool
	evidenceMu     sync.Mutex
	evidence       []string
	startTimeout   time.Duration
	stopTimeout    time.Duration
	cleanupTimeout time.Duration
	// watches are the managers' open watch requests (watches.go).
	watches watchLedger
	// externals are Options.Externals by Name.
	externals map[string]External
	// hooks serves the operator's webhooks (webhook.go).
	hooks *webhooks
	// timelineFor selects the passing specs that get a timeline too (ENSEMBLE_TIMELINE); nil selects none.
	timelineFor *regexp.Regexp

	interrupted atomic.Bool
	// failed is the first error of a manager that stopped on its own (guarded by mu).
	failed error
	plane  *controlplane.Plane
	// codecFactory decodes the protobuf and JSON bodies the recording transports read (codecs).
	codecsOnce   sync.Once
	codecFactory serializer.CodecFactory
	kcmLog       *lineLog
	// audit records the writes kube-apiserver's audit log holds that no client of the harness sent.
	audit *auditReader
	// namespaceController is true when kube-controller-manager deletes namespaces; terminating are the case
	// namespaces handed to it (guarded by mu).
	namespaceController bool
	terminating         []terminating
	reader              client.Reader
	rec                 *recorder
	stream              *stream
	gate                *gate
	notify              *broadcast
	cancel              context.CancelFunc
	mu                  sync.Mutex
	// pmu guards plans, the perturbation of each case namespace that has one (perturbation.go).
	pmu   sync.Mutex
	plans map[string]*plan
	// chmu guards changeTriggers, the points with change triggers the cases armed.
	chmu           sync.Mutex
	changeTriggers []*changeTrigger
	// runs are ENSEMBLE_PERTURB's runs of each spec, one (unperturbed) without it (see beginRun);
	// specRuns counts each spec's runs and lastSpec is the spec whose run began last (guarded by mu).
	// baselines are ENSEMBLE_BASELINE's end states by spec name, for the differential oracle; exploreDir is
	// ENSEMBLE_EXPLORE's directory, where each case leaves its perturb.Record.
	runs       [][]perturb.Point
	specRuns   map[string]*specRun
	lastSpec   string
	baselines  map[string][]map[string]map[string]string
	exploreDir string
	// reads notes the managers' reads for the records of an unperturbed explore run (ENSEMBLE_EXPLORE
	// without ENSEMBLE_BASELINE); nil otherwise, and then no read is noted.
	reads    *readLog
	managers map[string]*Manager
	order    []string
	stopOnce sync.Once
	stopErr  error
}

// Manager is a running manager started by Boot or StartManager. A restart point (perturb.Restart) stops
// the instance and starts a fresh one under the same name; the handle follows it, so Stop stops the
// instance running now and Elected is that instance's.
type Manager struct {
	// Name is ManagerOptions.Name.
	Name string
	mgr  manager.Manager
	// opts start the manager again after a restart point; wm is the manager Register was given (its fence
	// refuses writes once the point stopped it); holds are its cache's held objects (stale and coalesce).
	opts  ManagerOptions
	wm    *wrappingManager
	holds *holds
	stop  context.CancelFunc
	done  chan error
	once  sync.Once
	err   error
	s     *Suite
	// rmu guards stopped (Stop was called: a restart under way starts nothing) and successor (the instance
	// a restart point started in this one's place).
	rmu       sync.Mutex
	stopped   bool
	successor *Manager
}

// Stop stops the manager and waits (bounded by Options.StopTimeout) for its controllers to return.
// Errors: the manager's own error, or a timeout.
func (m *Manager) Stop() error {
	return errors.Join(stopAll([]*Manager{m}, m.stopTimeout())...)
}

// stopAll cancels every manager of ms, in order, with the instances restart points started in their place,
// then waits for all of them against one deadline, timeout from now, and returns their errors: a manager
// slow to stop does not hold up the others' cancellation nor lengthen their wait.
func stopAll(ms []*Manager, timeout time.Duration) []error {
	var instances []*Manager
	for _, m := range ms {
		instances = append(instances, m.cancel()...)
	}
	deadline := time.Now().Add(timeout)
	var errs []error
	for _, in := range instances {
		if err := in.stopInstance(deadline, timeout); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// cancel marks the manager stopped (a restart under way then starts nothing) and cancels its instance and
// each successor a restart point started, without waiting; it returns those instances, this one first.
func (m *Manager) cancel() []*Manager {
	var instances []*Manager
	for in := m; in != nil; {
		in.rmu.Lock()
		in.stopped = true
		next := in.successor
		in.rmu.Unlock()
		in.stop()
		instances = append(instances, in)
		in = next
	}
	return instances
}

// stopInstance stops this instance only (once) and waits for it until deadline; timeout is what the error
// names. Later calls return the first call's error.
func (m *Manager) stopInstance(deadline time.Time, timeout time.Duration) error {
	m.once.Do(func() {
		m.stop()
		m.err = m.wait(deadline, timeout)
		m.rmu.Lock()
		if m.stopped {
			// Its owner stopped it (a restart point's restart keeps serving webhooks under its name).
			m.s.hooks.release(m.Name)
		}
		m.rmu.Unlock()
		m.s.mu.Lock()
		delete(m.s.managers, m.Name)
		m.s.mu.Unlock()
	})
	return m.err
}

// wait waits until the cancelled instance returns or deadline passes. Errors: the manager's own, or a timeout.
func (m *Manager) wait(deadline time.Time, timeout time.Duration) error {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	var err error
	select {
	case err = <-m.done:
	case <-timer.C:
		// A deadline already past fires at once: an instance that has returned by then stopped in time.
		select {
		case err = <-m.done:
		default:
			return fmt.Errorf("suite: manager %s did not stop within %s: make its reconcilers and runnables "+
				"return once their context is cancelled, or raise Options.StopTimeout", m.Name, timeout)
		}
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("suite: manager %s: %w", m.Name, err)
	}
	return nil
}

// Elected is closed once the manager leads and its controllers start: when it acquires its Lease with
// ManagerOptions.LeaderElection, at once without (controller-runtime's manager.Elected). It stays open for a
// follower, and for a manager stopped before it led.
func (m *Manager) Elected() <-chan struct{} {
	m.rmu.Lock()
	next := m.successor
	m.rmu.Unlock()
	if next != nil {
		return next.Elected()
	}
	return m.mgr.Elected()
}

// restarted makes next the successor of m, which a restart point stopped; false (and next is stopped)
// when m's owner stopped it meanwhile.
func (m *Manager) restarted(next *Manager) bool {
	m.rmu.Lock()
	if !m.stopped {
		m.successor = next
	}
	stopped := m.stopped
	m.rmu.Unlock()
	if stopped {
		_ = next.Stop()
	}
	return !stopped
}

// stopTimeout is Options.StopTimeout, or 1 s once the run was interrupted: the control plane is already
// gone then, and a manager waiting on it would only hold up the framework's own interrupt handling.
func (m *Manager) stopTimeout() time.Duration {
	if m.s.interrupted.Load() {
		return time.Second
	}
	return m.s.stopTimeout
}

// managerFailed keeps the first error of a manager that stopped on its own; Cases fail with it.
func (s *Suite) managerFailed(err error) {
	s.mu.Lock()
	if s.failed == nil {
		s.failed = err
	}
	s.mu.Unlock()
	s.notify.signal()
}

// broken returns why Cases can no longer trust the run: an interrupt, or a manager that stopped on its own.
func (s *Suite) broken() error {
	if s.interrupted.Load() {
		return errInterrupted
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failed
}

// Interrupted reports whether a SIGINT or SIGTERM stopped the suite: the control plane is gone, so
// after-suite checks that need it should stand down rather than add a misleading failure.
func (s *Suite) Interrupted() bool { return s.interrupted.Load() }

// Boot starts envtest with the binaries in $KUBEBUILDER_ASSETS (else setup-envtest's directory, where `make
// envtest-assets` builds them; each is checked with --version first), installs the CRDs, starts
// kube-controller-manager (Options.KubeControllers), the event stream and one manager per ManagerOptions,
// and returns once every cache has synced. On SIGINT or SIGTERM it stops
// the managers and the control plane, so no kube-apiserver or etcd outlives the test process (a test
// framework that handles the signal, such as Ginkgo, then ends the run as usual; otherwise the signal is
// re-raised after a grace period). Control planes left by a test process that was killed outright are
// killed by the next Boot.
//
// Errors (each one line that says what to do): missing envtest binaries or ones of another version, a CRD
// path that does not exist, does not parse or holds no CRD, a nil, unnamed or repeated CRD object, a CRD the
// API server refuses, a binary that does
// not come up within Options.StartTimeout, a nil Scheme, an empty, duplicate or reserved manager name, a
// controller that cannot be wrapped, a manager that fails to register or start, an external system with an
// empty, duplicate or unwritable name or without Down or Slow, an ENSEMBLE_TIMELINE that is neither 1 nor a
// regexp, an ENSEMBLE_PERTURB, ENSEMBLE_MUTANTS or ENSEMBLE_MUTANTS_SKIP that does not parse, a webhook path
// that does not exist or holds no configuration, a configured webhook or conversion no manager registers a
// handler for, webhooks the API server does not call within Options.StartTimeout, an
// interrupt. With pins.ListEnvVar set Boot writes a listing of Options.Pins to the file it names, boots
// nothing and returns an error that says so (`ensemble defect-matrix` learns the suite's catalog that way).
// Whatever Boot started is stopped before it returns an error.
func Boot(ctx context.Context, opts Options) (*Suite, error) {
	start := time.Now()
	if listing, err := listPins(opts.Pins); listing {
		return nil, err
	}
	// A pin's evidence written to an artifacts directory nobody asked for is removed at Stop.
	evidenceAsked := opts.ArtifactsDir != "" || os.Getenv("ENSEMBLE_ARTIFACTS") != ""
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	if err := validateManagers(opts.Managers); err != nil {
		return nil, err
	}
	externals, err := validateExternals(opts.Externals)
	if err != nil {
		return nil, err
	}
	timelineFor, err := timelineFilter(os.Getenv("ENSEMBLE_TIMELINE"))
	if err != nil {
		return nil, err
	}
	if _, err := controlplane.AssetsDir(); err != nil {
		return nil, err
	}
	crdPaths, err := resolveCRDPaths(opts.CRDDirectoryPaths)
	if err != nil {
		return nil, err
	}
	if err := validateCRDs(opts.CRDs); err != nil {
		return nil, err
	}
	hooks, err := readWebhooks(opts.Webhooks)
	if err != nil {
		return nil, err
	}
	if opts.Logger != nil {
		logf.SetLogger(*opts.Logger)
	} else if os.Getenv("ENSEMBLE_LOG") == "1" {
		logf.SetLogger(zap.New(zap.UseDevMode(true), zap.WriteTo(os.Stderr)))
	} else {
		logf.SetLogger(logr.Discard())
	}

	notify, sc := newBroadcast(), newScopes()
	s := &Suite{timelineFor: timelineFor, scheme: opts.Scheme, watchKinds: opts.WatchKinds, requeueClamp: opts.RequeueClamp,
		requeueCompressAbove: opts.RequeueCompressAbove, pins: opts.Pins,
		dumpers: opts.Dumpers, artifactsDir: opts.ArtifactsDir, evidenceAsked: evidenceAsked, startTimeout: opts.StartTimeout,
		stopTimeout: opts.StopTimeout, cleanupTimeout: opts.CleanupTimeout,
		notify: notify, rec: newRecorder(opts.Scheme, notify, sc), stream: newStream(opts.Scheme, notify, sc),
		gate: newGate(), managers: map[string]*Manager{}, externals: externals, hooks: hooks}
	if err := s.perturbationEnv(); err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:     crdPaths,
		CRDs:                  opts.CRDs,
		ErrorIfCRDPathMissing: true,
		// envtest waits 10 s by default for the CRDs to be served, which a loaded machine can exceed.
		CRDInstallOptions:        envtest.CRDInstallOptions{MaxTime: opts.StartTimeout},
		Scheme:                   opts.Scheme,
		ControlPlaneStartTimeout: opts.StartTimeout,
		ControlPlaneStopTimeout:  opts.StopTimeout,
		// Webhook servers listen on loopback only (envtest picks the port and makes the certificates).
		WebhookInstallOptions: envtest.WebhookInstallOptions{LocalServingHost: "127.0.0.1"},
	}
	plane, err := controlplane.Start(env, func() {
		s.interrupted.Store(true)
		_ = s.Stop()
	})
	if err != nil {
		return nil, err
	}
	s.plane = plane
	if err := hooks.pointAt(env); err != nil {
		_ = s.Stop()
		return nil, err
	}
	s.EnvtestBoot = time.Since(start)
	// The administrator's requests carry the harness's Audit-IDs too: the audit log's reader leaves them out.
	cfg := rest.CopyConfig(plane.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &recordingTransport{next: rt} })
	s.Config = cfg
	if s.Client, err = client.New(cfg, client.Options{Scheme: opts.Scheme}); err != nil {
		_ = s.Stop()
		return nil, fmt.Errorf("suite: client: %w", err)
	}
	if s.audit, err = s.startAuditReader(plane.AuditLog()); err != nil {
		_ = s.Stop()
		return nil, err
	}
	s.rec.catchUp = s.audit.catchUp
	if err := s.startKubeControllers(ctx, opts.KubeControllers); err != nil {
		_ = s.Stop()
		return nil, err
	}

	if err := s.startStream(ctx, cfg); err != nil {
		_ = s.Stop()
		return nil, err
	}
	for _, mo := range opts.Managers {
		if _, err := s.StartManager(mo); err != nil {
			_ = s.Stop()
			return nil, err
		}
	}
	if err := s.installWebhooks(ctx); err != nil {
		_ = s.Stop()
		return nil, err
	}
	s.Ready = time.Since(start)
	return s, nil
}

// startStream starts the event stream's informer cache on the watched kinds and waits (Options.StartTimeout)
// for it to sync. Errors: a watched kind not in the scheme or not served, a cache that does not sync, an
// interrupt.
func (s *Suite) startStream(ctx context.Context, cfg *rest.Config) error {
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel = cancel
	streamCache, err := cache.New(cfg, cache.Options{Scheme: s.scheme})
	if err == nil {
		err = s.stream.watch(runCtx, streamCache, s.watchKinds)
	}
	if err != nil {
		return err
	}
	s.reader = streamCache
	go func() { _ = streamCache.Start(runCtx) }()
	syncCtx, syncCancel := context.WithTimeout(runCtx, s.startTimeout)
	defer syncCancel()
	if !streamCache.WaitForCacheSync(syncCtx) {
		if s.interrupted.Load() {
			return errInterrupted
		}
		return fmt.Errorf("suite: the event stream's cache did not sync within %s", s.startTimeout)
	}
	return nil
}

func (o *Options) defaults() error {
	if o.Scheme == nil {
		return errors.New("suite: Options.Scheme is nil: build a runtime.Scheme with clientgoscheme.AddToScheme and each operator's AddToScheme")
	}
	if o.RequeueClamp == 0 {
		o.RequeueClamp = defaultRequeueClamp
	}
	if o.RequeueCompressAbove == 0 {
		o.RequeueCompressAbove = defaultRequeueCompressAbove
	}
	if o.StartTimeout == 0 {
		o.StartTimeout = 60 * time.Second
	}
	if o.StopTimeout == 0 {
		o.StopTimeout = 20 * time.Second
	}
	if o.CleanupTimeout == 0 {
		o.CleanupTimeout = 30 * time.Second
	}
	if o.ArtifactsDir == "" {
		o.ArtifactsDir = os.Getenv("ENSEMBLE_ARTIFACTS")
	}
	if o.ArtifactsDir == "" {
		o.ArtifactsDir = filepath.Join(os.TempDir(), "ensemble-artifacts")
	}
	return nil
}

func validateManagers(ms []ManagerOptions) error {
	seen := map[string]int{}
	for i, m := range ms {
		if err := validateManager(m); err != nil {
			return fmt.Errorf("suite: Options.Managers[%d]: %w", i, err)
		}
		if j, dup := seen[m.Name]; dup {
			return fmt.Errorf("suite: Options.Managers[%d] and [%d] are both named %q: give each manager a unique Name (writes are attributed by it)", j, i, m.Name)
		}
		seen[m.Name] = i
	}
	return nil
}

func validateManager(m ManagerOptions) error {
	if strings.TrimSpace(m.Name) == "" {
		return errors.New("Name is empty: give each manager a unique Name (writes and passes are attributed to it)")
	}
	if strings.ContainsAny(m.Name, "/ \t") || m.Name == "case" {
		return fmt.Errorf("Name %q is not a plain name (no '/', no space, not \"case\", which a Case's own writes use): use one such as \"multigres\"", m.Name)
	}
	if m.Client.HTTPClient != nil {
		return fmt.Errorf("manager %q sets Client.HTTPClient: leave it nil, the harness builds each manager's HTTP client from its rest config (User-Agent, no gzip, open-watch bookkeeping)", m.Name)
	}
	if m.Client.Cache != nil && m.Client.Cache.Reader != nil {
		return fmt.Errorf("manager %q sets Client.Cache.Reader: leave it nil, each manager instance reads through its own cache (a restart point's or a batch run's fresh instance too), which controller-runtime sets", m.Name)
	}
	if m.Register == nil {
		return fmt.Errorf("manager %q has no Register: set it to a func that sets the operator up on the manager it is given, as its main does", m.Name)
	}
	return nil
}

// StartManager starts another manager on the booted envtest (for instance a second operator instance in
// the middle of a spec) and returns once its cache has synced (its controllers start right after). Errors: an invalid or duplicate name, the
// Register func's error, a cache that does not sync within Options.StartTimeout.
func (s *Suite) StartManager(mo ManagerOptions) (*Manager, error) {
	m, ctx, err := s.launchManager(mo)
	if err != nil {
		return nil, err
	}
	if err := s.synced(ctx, m); err != nil {
		return nil, err
	}
	return m, nil
}

// launchManager is StartManager up to the manager's start: it builds the manager, calls Register and starts
// the manager on a goroutine, and returns it with the instance's context without waiting on its cache.
// Errors: StartManager's, but the cache's.
func (s *Suite) launchManager(mo ManagerOptions) (*Manager, context.Context, error) {
	if err := validateManager(mo); err != nil {
		return nil, nil, fmt.Errorf("suite: StartManager: %w", err)
	}
	s.mu.Lock()
	if _, dup := s.managers[mo.Name]; dup {
		s.mu.Unlock()
		return nil, nil, fmt.Errorf("suite: StartManager: a manager named %q is already running: give the new one another Name", mo.Name)
	}
	s.mu.Unlock()
	cfg := rest.CopyConfig(s.plane.Config)
	cfg.UserAgent = mo.UserAgent
	if cfg.UserAgent == "" {
		cfg.UserAgent = "ensemble-" + mo.Name + "/v0"
	}
	fence := &atomic.Pointer[perturb.Point]{}
	s.wrapTransport(cfg, writer{manager: mo.Name, fence: fence, ungated: mo.Ungated, userAgent: cfg.UserAgent})
	// Every client built from the manager's config (its own, and those the operator builds from
	// mgr.GetConfig()) notes its open watches, so a stop that times out names the manager still holding one.
	cfg.Wrap(s.watches.wrap(mo.Name, cfg.UserAgent))
	scheme := mo.Scheme
	if scheme == nil {
		scheme = s.scheme
	}
	leNS := mo.LeaderElectionNamespace
	if leNS == "" {
		leNS = "default"
	}
	ws := s.hooks.newServer(s, mo.Name)
	h := newHolds(scheme)
	h.changed = func(k heldKey, ev watch.Event) *changeTrigger { return s.changeAt(mo.Name, k, ev) }
	var newCache cache.NewCacheFunc
	if s.reads != nil {
		// Only an unperturbed explore run notes reads: otherwise the manager's cache is controller-runtime's own.
		newCache = readingCacheFunc(s.reads, mo.Name, scheme)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme,
		Cache:                         h.wrapCache(mo.Cache),
		NewCache:                      newCache,
		Metrics:                       metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:        "0",
		LeaderElection:                mo.LeaderElection,
		LeaderElectionID:              mo.LeaderElectionID,
		LeaderElectionNamespace:       leNS,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 ptr.To(leaseDuration),
		RenewDeadline:                 ptr.To(leaseRenewDeadline),
		RetryPeriod:                   ptr.To(leaseRetryPeriod),
		GracefulShutdownTimeout:       ptr.To(s.stopTimeout),
		WebhookServer:                 ws,
		Client:                        instanceClientOptions(mo.Client),
		Controller:                    controllerConfig(mo.Controller, s.startTimeout),
	})
	if err != nil {
		return nil, nil, fmt.Errorf("suite: manager %s: %w", mo.Name, err)
	}
	wm := s.newWrappingManager(mgr, mo.Name, mo.Ungated, fence)
	// The instance's context: Register gets it, the manager runs on it, and stopping the instance cancels it.
	ctx, cancel := context.WithCancel(context.Background())
	if err := mo.Register(ctx, wm); err != nil {
		cancel()
		if wm.err != nil {
			return nil, nil, wm.err
		}
		return nil, nil, fmt.Errorf("suite: manager %s: Register: %w", mo.Name, err)
	}
	if wm.err != nil {
		// Register went on past a controller the harness refused: still an error, never unrecorded passes.
		cancel()
		return nil, nil, wm.err
	}
	s.hooks.claim(ws)
	stop := func() {
		wm.markStopped()
		cancel()
	}
	m := &Manager{Name: mo.Name, mgr: mgr, opts: mo, wm: wm, holds: h, stop: stop, done: make(chan error, 1), s: s}
	go func() {
		err := mgr.Start(ctx)
		if err != nil && ctx.Err() == nil {
			s.managerFailed(fmt.Errorf("suite: manager %s stopped: %w", mo.Name, err))
		}
		m.done <- err
	}()
	return m, ctx, nil
}

// synced waits until the cache of m, launched on ctx, has synced, then counts m among the running managers.
// Errors: a cache that does not sync within Options.StartTimeout (m is stopped then).
func (s *Suite) synced(ctx context.Context, m *Manager) error {
	syncCtx, syncCancel := context.WithTimeout(ctx, s.startTimeout)
	defer syncCancel()
	if !m.mgr.GetCache().WaitForCacheSync(syncCtx) {
		_ = m.Stop()
		return fmt.Errorf("suite: manager %s: cache did not sync within %s (are its kinds' CRDs installed?)", m.Name, s.startTimeout)
	}
	s.mu.Lock()
	s.managers[m.Name] = m
	if !slices.Contains(s.order, m.Name) {
		s.order = append(s.order, m.Name)
	}
	s.mu.Unlock()
	return nil
}

// instanceClientOptions is o for one manager instance, with a Cache of its own. controller-runtime sets
// Cache.Reader to the instance's cache in the client options it is handed, through the pointer o.Cache
// (cluster.New), so options shared by the instances of one ManagerOptions (a restart point's, a batch run's,
// both started from Manager.opts) had every later instance's client read through the first instance's cache,
// stopped with it: cluster-api's second run never saw its Cluster, every Get of it NotFound while the fresh
// cache held it. The copy leaves o.Cache as the operator set it (Reader nil, which validateManager requires).
func instanceClientOptions(o client.Options) client.Options {
	if o.Cache != nil {
		c := *o.Cache
		o.Cache = &c
	}
	return o
}

// controllerConfig is the manager's controller configuration: c, the operator's, with SkipNameValidation
// set (one operator's controllers run in several managers of the process) and CacheSyncTimeout at most
// startTimeout, so a controller whose sources cannot sync (a watched kind with no CRD) makes its manager fail
// within the start timeout instead of controller-runtime's 2 minutes or main's own; the failure then fails
// the next check.
func controllerConfig(c config.Controller, startTimeout time.Duration) config.Controller {
	c.SkipNameValidation = ptr.To(true)
	if c.CacheSyncTimeout <= 0 || c.CacheSyncTimeout > startTimeout {
		c.CacheSyncTimeout = startTimeout
	}
	return c
}

// Stop checks that every case namespace handed to the namespace controller more than 30 s ago is gone (deletion hygiene; the error names the spec and what holds it), then stops every manager, the
// event stream, kube-controller-manager and envtest, within Options.StopTimeout per part (the managers,
// cancelled all at once, share one), and makes
// sure the kube-apiserver and etcd processes are gone (killing them if they outlive envtest's stop). Safe to
// call more than once and from several goroutines; later calls return the first call's error.
func (s *Suite) Stop() error {
	s.stopOnce.Do(func() {
		var errs []error
		if s.Client != nil && !s.interrupted.Load() {
			if err := s.namespaceHygiene(); err != nil {
				errs = append(errs, err)
			}
		}
		errs = append(errs, s.stopManagers()...)
		if s.cancel != nil {
			s.cancel()
		}
		s.audit.stop()
		if s.plane != nil {
			// The managers' watches open now, the managers stopped: those no client closes while the control
			// plane stops are what a stop that times out waited for.
			open := s.watches.snapshot()
			if err := s.plane.Stop(); err != nil {
				if open := s.watches.heldOpen(open); open != "" {
					// kube-apiserver waits for open watches: name who holds one, since the stop's own error
					// names no cause.
					err = fmt.Errorf("%w; watches still open on it: %s (end such a watch with its manager: start it on the ctx ManagerOptions.Register gets, not on context.Background())", err, open)
				}
				errs = append(errs, err)
			}
		}
		s.removeEvidence()
		s.stopErr = errors.Join(errs...)
	})
	return s.stopErr
}

// stopManagers cancels the running managers, last started first, then waits for them all against one
// deadline (Options.StopTimeout from when the last was cancelled), and returns their errors: one for each
// manager that did not stop by then, naming it.
func (s *Suite) stopManagers() []error {
	s.mu.Lock()
	var ms []*Manager
	for i := len(s.order) - 1; i >= 0; i-- {
		if m, ok := s.managers[s.order[i]]; ok {
			ms = append(ms, m)
		}
	}
	s.mu.Unlock()
	if len(ms) == 0 {
		return nil
	}
	errs := stopAll(ms, ms[0].stopTimeout())
	if s.interrupted.Load() {
		// After an interrupt the control plane is gone and managers stop slowly or with errors: that is the
		// interrupt, not a further failure.
		return nil
	}
	return errs
}
