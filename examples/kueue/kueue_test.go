package kueue

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	kueueapi "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	"sigs.k8s.io/kueue/pkg/features"
)

// TestCRDPathHoldsKueuesCRDs: the CRD directory holds the CRDs of the kinds the specs use.
func TestCRDPathHoldsKueuesCRDs(t *testing.T) {
	dir, err := CRDPath()
	if err != nil {
		t.Fatal(err)
	}
	for _, plural := range []string{"resourceflavors", "clusterqueues", "localqueues", "workloads", "workloadpriorityclasses"} {
		if _, err := os.Stat(filepath.Join(dir, kueueapi.GroupVersion.Group+"_"+plural+".yaml")); err != nil {
			t.Error(err)
		}
	}
}

// TestWebhooksKeepsTheCoreAndJobWebhooks: of Kueue's manifest, only the webhooks of kueue.x-k8s.io kinds and
// batch Jobs are kept, mutating and validating alike, and those of other integrations (Pods, JobSets, ...) go.
func TestWebhooksKeepsTheCoreAndJobWebhooks(t *testing.T) {
	opts, err := Webhooks()
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, m := range opts.Mutating {
		for _, w := range m.Webhooks {
			paths = append(paths, *w.ClientConfig.Service.Path)
		}
	}
	for _, v := range opts.Validating {
		for _, w := range v.Webhooks {
			paths = append(paths, *w.ClientConfig.Service.Path)
		}
	}
	for _, want := range []string{"/mutate-batch-v1-job", "/validate-batch-v1-job", "/mutate-kueue-x-k8s-io-v1beta2-clusterqueue",
		"/validate-kueue-x-k8s-io-v1beta2-workload"} {
		if !slices.Contains(paths, want) {
			t.Errorf("webhook %s missing from %v", want, paths)
		}
	}
	for _, p := range paths {
		if !strings.Contains(p, "-batch-v1-job") && !strings.Contains(p, "-kueue-x-k8s-io-") {
			t.Errorf("webhook %s kept, though Setup does not serve it", p)
		}
	}
}

// TestLoadTurnsOffWhatTheExampleDoesNotSetUp: config.yaml, as Kueue's loader defaults it, keeps the batch/job
// integration and turns off leader election, certificate management and the features Setup refuses.
func TestLoadTurnsOffWhatTheExampleDoesNotSetUp(t *testing.T) {
	s, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	opts, cfg, err := Load(s)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.Integrations.Frameworks, []string{"batch/job"}) {
		t.Errorf("frameworks %v, want [batch/job]", cfg.Integrations.Frameworks)
	}
	if opts.LeaderElection || *cfg.InternalCertManagement.Enable {
		t.Errorf("leader election %v, internal cert management %v: want both off", opts.LeaderElection, *cfg.InternalCertManagement.Enable)
	}
	for _, f := range []string{string(features.MultiKueue), string(features.TopologyAwareScheduling), string(features.VisibilityOnDemand)} {
		if on, ok := cfg.FeatureGates[f]; !ok || on {
			t.Errorf("feature gate %s: %v (set %v), want off", f, on, ok)
		}
	}
}
