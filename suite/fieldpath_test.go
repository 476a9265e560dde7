package suite

import (
	"maps"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/ensembletest/ensemble/internal/recordtb"
)

// TestFieldPathsRejectMalformed: the field paths a spec declares (AllowSharedField, AllowDifference,
// Permits) are checked at the call; a malformed one fails the case with one line naming the path and the
// form to use, and declares nothing. Paths as the stream and OwnershipOf render them pass.
func TestFieldPathsRejectMalformed(t *testing.T) {
	for _, ok := range []string{"data.k", "status", "status.conditions[type=Ready].status", "spec.ports[port=80,protocol=TCP]",
		"spec.finalizers[example.com/f]", "data.app.conf", "status.items[0][1]", "metadata.labels[a]"} {
		if err := checkFieldPath(ok); err != nil {
			t.Errorf("checkFieldPath(%q) = %v, want nil", ok, err)
		}
	}
	for bad, why := range map[string]string{
		"data..a[":     "empty field name",
		"":             "empty",
		".data":        "empty field name",
		"data.":        "ends with a dot",
		"data.a[":      "never closed",
		"data[]":       "empty selector",
		"[type=Ready]": "follows no field name",
		"data]":        "closes no selector",
		"a[x]b":        "put a dot before",
		"a[x[y]]":      "inside a selector",
	} {
		err := checkFieldPath(bad)
		if err == nil || !strings.Contains(err.Error(), why) || !strings.Contains(err.Error(), fieldPathGrammar) {
			t.Errorf("checkFieldPath(%q) = %v, want it to say %q and give the form", bad, err, why)
		}
	}

	declare := func(f func(c *Case)) (*recordtb.TB, *Case) {
		p := &recordtb.TB{TestName: "paths"}
		c := &Case{t: p, s: &Suite{}}
		f(c)
		return p, c
	}
	p, c := declare(func(c *Case) {
		c.AllowSharedField(Objects{Kind: "ConfigMap", Name: "shared"}, "data..a[", "on purpose")
	})
	if len(p.Fatals()) != 1 || strings.Contains(p.Fatals()[0], "\n") || !strings.Contains(p.Fatals()[0], `AllowSharedField(suite.Objects{Kind:"ConfigMap", Name:"shared", OwnerKind:""}, "data..a["`) ||
		!strings.Contains(p.Fatals()[0], fieldPathGrammar) || len(c.sharedOK) != 0 {
		t.Fatalf("AllowSharedField of a malformed path: fatals %q, declared %v; want one line naming the path and the form, nothing declared", p.Fatals(), c.sharedOK)
	}
	t.Log(p.Fatals()[0])
	p, c = declare(func(c *Case) { c.AllowSharedField(Objects{Kind: "ConfigMap", Name: "shared"}, "data.k", "on purpose") })
	if p.Failed() || !c.fieldAllowed(c.sharedOK, "ConfigMap", "shared", nil, "data.k") || !c.fieldAllowed(c.sharedOK, "ConfigMap", "shared", nil, "data.k.x") ||
		c.fieldAllowed(c.sharedOK, "ConfigMap", "shared", nil, "data.kk") || c.fieldAllowed(c.sharedOK, "ConfigMap", "other", nil, "data.k") {
		t.Fatalf("AllowSharedField of a good path: fatals %q, declared %v", p.Fatals(), c.sharedOK)
	}
	p, c = declare(func(c *Case) { c.AllowSharedField(Objects{Name: "shared"}, "data.k", "on purpose") })
	if len(p.Fatals()) != 1 || !strings.Contains(p.Fatals()[0], "give the objects' Kind") || len(c.sharedOK) != 0 {
		t.Fatalf("AllowSharedField without a kind: fatals %q, declared %v", p.Fatals(), c.sharedOK)
	}
	p, c = declare(func(c *Case) { c.AllowDifference(Objects{Kind: "Shard", Name: "s"}, "status.podRoles[", "timing") })
	if len(p.Fatals()) != 1 || !strings.Contains(p.Fatals()[0], `"status.podRoles["`) || len(c.differOK) != 0 {
		t.Fatalf("AllowDifference of a malformed path: fatals %q, declared %v", p.Fatals(), c.differOK)
	}
	if _, _, err := flattenPermits([]Permit{Permits(Modified, "ConfigMap", "a", "data.seen", "data..x")}); err == nil ||
		!strings.Contains(err.Error(), `"data..x"`) || !strings.Contains(err.Error(), fieldPathGrammar) {
		t.Fatalf("Permits with a malformed path: %v, want the path and the form named", err)
	}
}

// TestOwnershipAndChangesShareOneDialect: the paths OwnershipOf reads from managedFields and the paths
// flatten (Change.Fields, FieldWriters, the Differential oracle) renders from the object agree, for a
// multi-key list (container ports, keyed by containerPort and protocol), a set of scalars (finalizers), a
// single-key list (containers, conditions) and an atomic list (args): every field Ownership names is a
// field flatten renders or one above it.
func TestOwnershipAndChangesShareOneDialect(t *testing.T) {
	p := &corev1.Pod{}
	p.Finalizers = []string{"example.com/a", "example.com/f"}
	p.Spec.Containers = []corev1.Container{{Name: "c", Args: []string{"--x", "--y"},
		Ports: []corev1.ContainerPort{{ContainerPort: 80, Protocol: corev1.ProtocolTCP, Name: "http"}, {ContainerPort: 80, Protocol: corev1.ProtocolUDP}}}}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	p.ManagedFields = []metav1.ManagedFieldsEntry{
		{Manager: "op", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:finalizers":{".":{},"v:\"example.com/a\"":{},"v:\"example.com/f\"":{}}},` +
			`"f:spec":{"f:containers":{"k:{\"name\":\"c\"}":{".":{},"f:name":{},"f:args":{},"f:ports":{".":{},` +
			`"k:{\"containerPort\":80,\"protocol\":\"TCP\"}":{".":{},"f:containerPort":{},"f:protocol":{},"f:name":{}},` +
			`"k:{\"containerPort\":80,\"protocol\":\"UDP\"}":{".":{},"f:containerPort":{},"f:protocol":{}}}}}}}`)}},
		{Manager: "kubelet", Subresource: "status", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:status":{"f:conditions":{"k:{\"type\":\"Ready\"}":{".":{},"f:type":{},"f:status":{}}}}}`)}},
	}
	own, err := OwnershipOf(p)
	if err != nil {
		t.Fatal(err)
	}
	flat := flatten(p)
	for m, paths := range own {
		for _, path := range paths {
			if !slices.ContainsFunc(slices.Collect(maps.Keys(flat)), func(f string) bool { return under(f, path) }) {
				t.Errorf("Ownership names %s's field %s, which no path of Change.Fields is or is under; flatten has:\n%s", m, path, strings.Join(slices.Sorted(maps.Keys(flat)), "\n"))
			}
		}
	}
	for _, want := range []string{"metadata.finalizers[example.com/f]", "spec.containers[name=c].ports[containerPort=80,protocol=UDP].protocol",
		"spec.containers[name=c].ports[containerPort=80,protocol=TCP].name", "spec.containers[name=c].args[1]", "status.conditions[type=Ready].status"} {
		if _, ok := flat[want]; !ok {
			t.Errorf("flatten has no %s; it has:\n%s", want, strings.Join(slices.Sorted(maps.Keys(flat)), "\n"))
		}
	}
	for _, path := range []string{"metadata.finalizers[example.com/f]", "spec.containers[name=c].ports[containerPort=80,protocol=TCP].name"} {
		if got := own.Owners(path); len(got) != 1 || got[0] != "op" {
			t.Errorf("Owners(%s) = %v, want [op]", path, got)
		}
	}
}

// TestDialectOptionalKeysAndLargeNumbers: a list-map element without an optional key is keyed by the keys
// it has, whatever order the managedFields entries are read in, and a number of a million or more reads the
// same in flatten and in Ownership (2000000, not 2e+06).
func TestDialectOptionalKeysAndLargeNumbers(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1", "kind": "Thing", "metadata": map[string]any{"name": "t"},
		"spec": map[string]any{
			"refs":   []any{map[string]any{"name": "a", "namespace": "n", "x": "1"}, map[string]any{"name": "b", "x": "2"}},
			"shards": []any{map[string]any{"id": int64(2000000), "x": "3"}},
		},
	}}
	u.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: "op", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{` +
		`"f:refs":{"k:{\"name\":\"a\",\"namespace\":\"n\"}":{"f:x":{}},"k:{\"name\":\"b\"}":{"f:x":{}}},` +
		`"f:shards":{"k:{\"id\":2000000}":{"f:x":{}}}}}`)}}})
	own, err := OwnershipOf(u)
	if err != nil {
		t.Fatal(err)
	}
	for range 5 { // map order varies from run to run
		clear(shapeCache.m)
		flat := flatten(u)
		for _, path := range own["op"] {
			if _, ok := flat[path]; !ok {
				t.Fatalf("Ownership's %s is not a field of flatten's:\n%s", path, strings.Join(slices.Sorted(maps.Keys(flat)), "\n"))
			}
		}
	}
}

// TestOracleExceptionsByKindAndOwner: an exception declared for a kind covers every object of that kind,
// whatever its name (MachineSets' names are generated), and one narrowed by an owner kind covers only the
// objects with an ownerReference of that kind, read from the object (SharedFields) or from its flattened
// end state (Differential).
func TestOracleExceptionsByKindAndOwner(t *testing.T) {
	p := &recordtb.TB{TestName: "by-kind"}
	c := &Case{t: p, s: &Suite{}}
	c.AllowSharedField(Objects{Kind: "MachineSet", OwnerKind: "MachineDeployment"}, "metadata.finalizers", "co-owned on purpose")
	c.AllowSharedField(Objects{Kind: "Machine"}, "status.phase", "any Machine")
	if p.Failed() {
		t.Fatal(p.Fatals())
	}
	for _, tc := range []struct {
		kind, name string
		owners     []string
		path       string
		want       bool
	}{
		{"MachineSet", "md-7xk2p", []string{"MachineDeployment"}, "metadata.finalizers[cluster.x-k8s.io/md]", true},
		{"MachineSet", "md-q9w4z", []string{"Cluster", "MachineDeployment"}, "metadata.finalizers", true},
		{"MachineSet", "md-7xk2p", nil, "metadata.finalizers", false},
		{"MachineSet", "md-7xk2p", []string{"Cluster"}, "metadata.finalizers", false},
		{"MachineSet", "md-7xk2p", []string{"MachineDeployment"}, "spec.replicas", false},
		{"Machine", "m-1", nil, "status.phase", true},
		{"MachineDeployment", "md", nil, "metadata.finalizers", false},
	} {
		if got := c.fieldAllowed(c.sharedOK, tc.kind, tc.name, tc.owners, tc.path); got != tc.want {
			t.Errorf("%s/%s owned by %v, %s: allowed %v, want %v", tc.kind, tc.name, tc.owners, tc.path, got, tc.want)
		}
	}
	ms := &unstructured.Unstructured{}
	ms.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "cluster.x-k8s.io/v1beta2", Kind: "MachineDeployment", Name: "md", UID: "u1"}})
	if got := flatOwnerKinds(flatten(ms)); !slices.Equal(got, []string{"MachineDeployment"}) {
		t.Errorf("owner kinds read from the flattened object: %v, want [MachineDeployment]", got)
	}
	if got := (Objects{Kind: "MachineSet", OwnerKind: "MachineDeployment"}).String(); got != "every MachineSet owned by a MachineDeployment" {
		t.Errorf("String() = %q", got)
	}
}
