package controlplane

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// DefaultKubeControllers are the kube-controller-manager controllers Boot runs unless told otherwise: those
// operators lean on that need no node and no cloud (real garbage collection and namespace deletion,
// Deployments, ReplicaSets, StatefulSets, Jobs and CronJobs that progress, Endpoints and EndpointSlices,
// PodDisruptionBudgets, finished Jobs cleaned up, a default ServiceAccount per namespace).
var DefaultKubeControllers = []string{
	"garbage-collector-controller", "namespace-controller", "deployment-controller", "replicaset-controller",
	"statefulset-controller", "job-controller", "cronjob-controller", "endpoints-controller",
	"endpointslice-controller", "disruption-controller", "ttl-after-finished-controller", "serviceaccount-controller",
}

// KubeControllerManagerUser is the user kube-controller-manager authenticates as. It runs with
// --use-service-account-credentials=false, so every controller of it writes as this user, and each names
// itself at the end of its User-Agent ("kube-controller-manager/v0.0.0 (linux/amd64) kubernetes/$Format/replicaset-controller").
const KubeControllerManagerUser = "ensemble-kube-controller-manager"

// kcm is a running kube-controller-manager.
type kcm struct {
	cmd  *exec.Cmd
	dir  string
	done chan struct{}
}

// StartKubeControllerManager runs kube-controller-manager against the plane's API server with the given
// controllers (its --controllers flag), as an administrator made for it, on loopback only, without leader
// election or cloud provider; its output goes to log. It is recorded and stopped with the plane (also on
// signals and by the next Start after a SIGKILL). It returns once the process started; whether its
// controllers work is for the caller to check. Errors: the binary is missing or of another version, or it
// could not start.
func (p *Plane) StartKubeControllerManager(controllers []string, log io.Writer) error {
	path := binaryPath("kube-controller-manager", p.env.BinaryAssetsDirectory)
	if err := checkVersion(path, "Kubernetes v"+KubernetesVersion); err != nil {
		return fmt.Errorf("%w (or set suite's Options.KubeControllers to an empty slice to run without kube-controller-manager)", err)
	}
	user, err := p.env.AddUser(envtest.User{Name: KubeControllerManagerUser, Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fmt.Errorf("ensemble: kube-controller-manager: a user for it: %w", err)
	}
	kubeconfig, err := uncompressedKubeConfig(user)
	if err != nil {
		return fmt.Errorf("ensemble: kube-controller-manager: its kubeconfig: %w", err)
	}
	// In the plane's working directory, which the watchdog and the next Start remove after a SIGKILL.
	dir := filepath.Join(p.dir, "kube-controller-manager")
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("ensemble: kube-controller-manager: %w: point TMPDIR at a writable directory", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kubeconfig"), kubeconfig, 0o600); err != nil {
		_ = os.RemoveAll(dir)
		return fmt.Errorf("ensemble: kube-controller-manager: %w", err)
	}
	cmd := exec.Command(path,
		"--kubeconfig="+filepath.Join(dir, "kubeconfig"),
		"--controllers="+strings.Join(controllers, ","),
		"--leader-elect=false",
		// kube-controller-manager's own client is rate limited to 20 requests/s (burst 30) by default, which
		// made the collector take about 25 ms per dependent once the burst was spent; a test API server has
		// no other clients to protect.
		"--kube-api-qps=1000",
		"--kube-api-burst=2000",
		"--use-service-account-credentials=false",
		"--bind-address=127.0.0.1",
		"--secure-port=0",
		"--cert-dir="+dir,
	)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return fmt.Errorf("ensemble: kube-controller-manager (%s) did not start: %w (rebuild it with `make envtest-assets`)", path, err)
	}
	k := &kcm{cmd: cmd, dir: dir, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(k.done) }()
	p.mu.Lock()
	p.pids = append(p.pids, cmd.Process.Pid)
	p.kcm = k
	p.mu.Unlock()
	recordPlanes()
	return nil
}

// stopKCM stops kube-controller-manager (SIGTERM, SIGKILL after 5 s) and waits until it has exited.
func (p *Plane) stopKCM() {
	p.mu.Lock()
	k := p.kcm
	p.mu.Unlock()
	if k == nil {
		return
	}
	_ = k.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-k.done:
	case <-time.After(5 * time.Second):
		_ = k.cmd.Process.Kill()
		<-k.done
	}
	_ = os.RemoveAll(k.dir)
}

// uncompressedKubeConfig is user's kubeconfig with disable-compression set on its cluster, as the test
// process's own clients have it: kube-controller-manager's watches then cost kube-apiserver no gzip.
func uncompressedKubeConfig(user *envtest.AuthenticatedUser) ([]byte, error) {
	raw, err := user.KubeConfig()
	if err != nil {
		return nil, err
	}
	cfg, err := clientcmd.Load(raw)
	if err != nil {
		return nil, err
	}
	for _, c := range cfg.Clusters {
		c.DisableCompression = true
	}
	return clientcmd.Write(*cfg)
}
