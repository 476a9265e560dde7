package suite

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ensembletest/ensemble/internal/controlplane"
)

// startKubeControllers runs kube-controller-manager with controllers (nil: the default set; empty: none)
// and, when the garbage collector is among them, waits until it collects: a dependent of a deleted owner in
// the default namespace goes. Errors: the binary's, or a collector that does not collect within the start
// timeout.
func (s *Suite) startKubeControllers(ctx context.Context, controllers []string) error {
	if controllers == nil {
		controllers = controlplane.DefaultKubeControllers
	}
	if len(controllers) == 0 {
		return nil
	}
	s.kcmLog = &lineLog{max: 20000}
	start := time.Now()
	if err := s.plane.StartKubeControllerManager(controllers, s.kcmLog); err != nil {
		return err
	}
	s.namespaceController = slices.Contains(controllers, "namespace-controller")
	if slices.Contains(controllers, "garbage-collector-controller") {
		if err := s.waitForCollector(ctx); err != nil {
			return err
		}
	}
	s.KubeControllersReady = time.Since(start)
	return nil
}

// waitForCollector creates an owner and a dependent in the default namespace, deletes the owner and waits
// for the real garbage collector to delete the dependent.
func (s *Suite) waitForCollector(ctx context.Context) error {
	name := fmt.Sprintf("ensemble-gc-probe-%d", time.Now().UnixNano())
	owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}}
	if err := s.Client.Create(ctx, owner); err != nil {
		return fmt.Errorf("suite: probing the garbage collector: %w", err)
	}
	dep := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name + "-dependent",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID}}}}
	if err := s.Client.Create(ctx, dep); err != nil {
		return fmt.Errorf("suite: probing the garbage collector: %w", err)
	}
	if err := s.Client.Delete(ctx, owner, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
		return fmt.Errorf("suite: probing the garbage collector: %w", err)
	}
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, s.startTimeout, true, func(ctx context.Context) (bool, error) {
		return apierrors.IsNotFound(s.Client.Get(ctx, client.ObjectKeyFromObject(dep), &corev1.ConfigMap{})), nil
	})
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("suite: kube-controller-manager's garbage collector did not collect within %s (Options.StartTimeout); its log ends:\n%s", s.startTimeout, indent(s.kcmLog.last(10)))
	}
	return err
}

// lineLog keeps the last max lines written to it. Safe for concurrent use.
type lineLog struct {
	mu      sync.Mutex
	max     int
	lines   []string
	partial string
}

func (l *lineLog) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	text := l.partial + string(b)
	parts := strings.Split(text, "\n")
	l.partial = parts[len(parts)-1]
	l.lines = append(l.lines, parts[:len(parts)-1]...)
	if over := len(l.lines) - l.max; over > 0 {
		l.lines = append([]string(nil), l.lines[over:]...)
	}
	return len(b), nil
}

// last returns the last n lines.
func (l *lineLog) last(n int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.lines) > n {
		return append([]string(nil), l.lines[len(l.lines)-n:]...)
	}
	return append([]string(nil), l.lines...)
}

// mentioning returns the lines that name namespace ns (as klog's namespace key or an object key).
func (l *lineLog) mentioning(ns string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for _, line := range l.lines {
		if strings.Contains(line, `"`+ns+`"`) || strings.Contains(line, ns+"/") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// terminating is a case's namespace handed to the namespace controller.
type terminating struct {
	ns, spec string
	since    time.Time
}

// deleteNamespace deletes a case's namespace when kube-controller-manager runs the namespace controller
// (which empties and removes it in about 5 s; the next spec does not wait for it), and keeps it for the
// check at Stop.
func (s *Suite) deleteNamespace(ns, spec string) {
	if !s.namespaceController {
		return
	}
	_ = s.Client.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	s.mu.Lock()
	s.terminating = append(s.terminating, terminating{ns: ns, spec: spec, since: time.Now()})
	s.mu.Unlock()
}

// namespaceGoneBound is how long after its deletion a case namespace may still be there: the namespace
// controller takes about 5 s for an empty one.
const namespaceGoneBound = 30 * time.Second

// namespaceHygiene names every case namespace deleted more than namespaceGoneBound ago that is still
// there, with its spec and what its status conditions say holds it; nil when all went.
func (s *Suite) namespaceHygiene() error {
	s.mu.Lock()
	pending := append([]terminating(nil), s.terminating...)
	s.mu.Unlock()
	var stuck []string
	for _, t := range pending {
		if time.Since(t.since) < namespaceGoneBound {
			continue
		}
		ns := &corev1.Namespace{}
		err := s.Client.Get(context.Background(), client.ObjectKey{Name: t.ns}, ns)
		if apierrors.IsNotFound(err) {
			continue
		}
		var why []string
		for _, c := range ns.Status.Conditions {
			if c.Status == corev1.ConditionTrue {
				why = append(why, c.Message)
			}
		}
		stuck = append(stuck, fmt.Sprintf("%s (spec %q), deleted %s ago: %s", t.ns, t.spec, time.Since(t.since).Round(time.Second), strings.Join(why, "; ")))
	}
	if len(stuck) > 0 {
		return fmt.Errorf("suite: deletion hygiene: %d case namespaces were not gone %s after their specs:\n%s", len(stuck), namespaceGoneBound, indent(stuck))
	}
	return nil
}
