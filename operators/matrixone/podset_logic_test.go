package matrixone

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mov1 "github.com/ensembletest/ensemble/operators/matrixone/api/v1alpha1"
)

func TestPodSetNames(t *testing.T) {
	for got, want := range map[string]string{
		ConfigMapName("ls"):                   "ls-config",
		PodSetPodName("ls", 2):                "ls-2",
		ConfigKey("abc1234"):                  "config.toml-abc1234",
		DiscoveryAddress("ns", "ls"):          "ns/ls",
		FinalizerPrefix + DNSetControllerName: "matrixorigin.io/matrixone-dnset",
	} {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
	for name, want := range map[string]int{"ls-0": 0, "ls-12": 12} {
		if i, ok := podOrdinal("ls", name); !ok || i != want {
			t.Errorf("podOrdinal(%q) = %d, %v; want %d", name, i, ok, want)
		}
	}
	for _, name := range []string{"ls", "ls-", "ls-01", "ls-x", "ls-1-2", "other-1", "ls--1"} {
		if _, ok := podOrdinal("ls", name); ok {
			t.Errorf("podOrdinal(%q) accepted", name)
		}
	}
}

func TestRenderConfig(t *testing.T) {
	a := RenderConfig(ComponentDNSet, map[string]string{"z.key": "1", "log.level": "debug", "a": `q"b\`}, "r1", "ns/ls")
	want := strings.Join([]string{
		"# MatrixOne DNSet config, rendered by the matrixone operator: do not edit.",
		`a = "q\"b\\"`,
		`data-dir = "/var/lib/matrixone/data"`,
		`defaults-revision = "r1"`,
		`hakeeper-client.discovery-address = "ns/ls"`,
		`log.level = "debug"`, // spec overrides a default
		`service-type = "DN"`,
		`z.key = "1"`,
		"",
	}, "\n")
	if a != want {
		t.Errorf("rendered:\n%s\nwant:\n%s", a, want)
	}
	// Deterministic, whatever the map order.
	for range 20 {
		if b := RenderConfig(ComponentDNSet, map[string]string{"log.level": "debug", "a": `q"b\`, "z.key": "1"}, "r1", "ns/ls"); b != a {
			t.Fatalf("render not deterministic:\n%s\n%s", a, b)
		}
	}
	// The revision and the discovery address cannot be overridden by spec.config.
	c := RenderConfig(ComponentProxySet, map[string]string{ConfigDefaultsRevisionKey: "mine", ConfigDiscoveryKey: "x"}, "r2", "ns/ls")
	if !strings.Contains(c, `defaults-revision = "r2"`) || !strings.Contains(c, `hakeeper-client.discovery-address = "ns/ls"`) {
		t.Errorf("forced keys overridden:\n%s", c)
	}
	// A LogSet has no discovery key; control characters are escaped.
	l := RenderConfig(ComponentLogSet, map[string]string{"k": "a\nb\x01"}, "r1", "")
	if strings.Contains(l, ConfigDiscoveryKey) || !strings.Contains(l, `k = "a\nb\u0001"`) {
		t.Errorf("logset config:\n%s", l)
	}
}

func TestConfigDigest(t *testing.T) {
	r1 := RenderConfig(ComponentLogSet, nil, "r1", "")
	r2 := RenderConfig(ComponentLogSet, nil, "r2", "")
	d1, d2 := ConfigDigest(r1), ConfigDigest(r2)
	hex7 := regexp.MustCompile(`^[0-9a-f]{7}$`)
	if !hex7.MatchString(d1) || !hex7.MatchString(d2) {
		t.Fatalf("digests %q %q are not 7 hex characters", d1, d2)
	}
	if d1 == d2 {
		t.Errorf("a ConfigRevision change must change the digest (%s)", d1)
	}
	if ConfigDigest(r1) != d1 {
		t.Errorf("digest not stable")
	}
	// Components render differently even with equal spec.
	if ConfigDigest(RenderConfig(ComponentDNSet, nil, "r1", "ns/ls")) == ConfigDigest(RenderConfig(ComponentProxySet, nil, "r1", "ns/ls")) {
		t.Errorf("DN and proxy configs share a digest")
	}
}

func TestPruneConfigData(t *testing.T) {
	va, vb, vc := "config a", "config b", "config c"
	da, db, dc := ConfigDigest(va), ConfigDigest(vb), ConfigDigest(vc)
	old := map[string]string{
		EntrypointKey: "old script",
		ConfigKey(da): va,         // in use by a pod: kept
		ConfigKey(db): vb,         // no pod runs it: dropped
		ConfigKey(dc): "tampered", // a pod runs dc, but the value is not dc's: dropped
		"notes":       "x",        // no digest at all: dropped
	}
	desired := desiredConfigData("new config", ConfigDigest("new config"))
	data, dropped := pruneConfigData(old, desired, []string{"", da, dc, "unrelated"})
	want := maps.Clone(desired)
	want[ConfigKey(da)] = va
	if !maps.Equal(data, want) {
		t.Errorf("data %v, want %v", slices.Sorted(maps.Keys(data)), slices.Sorted(maps.Keys(want)))
	}
	if wantDropped := slices.Sorted(slices.Values([]string{ConfigKey(db), ConfigKey(dc), "notes"})); !slices.Equal(dropped, wantDropped) {
		t.Errorf("dropped %v", dropped)
	}
	if data[EntrypointKey] != startScript {
		t.Errorf("start.sh not refreshed")
	}
	// Pods without the annotation (empty suffix) keep nothing alive.
	if data, _ := pruneConfigData(old, desired, []string{"", ""}); len(data) != len(desired) {
		t.Errorf("empty suffixes kept old keys: %v", slices.Sorted(maps.Keys(data)))
	}
}

// TestConfigMapKeySequence replays the incident's ConfigMap: {toml-a} -> {a, b} while the pods still run a
// -> {b} once they run b.
func TestConfigMapKeySequence(t *testing.T) {
	ra, rb := RenderConfig(ComponentLogSet, nil, "r1", ""), RenderConfig(ComponentLogSet, nil, "r2", "")
	a, b := ConfigDigest(ra), ConfigDigest(rb)
	cm := desiredConfigData(ra, a)
	keys := func(m map[string]string) []string {
		var out []string
		for k := range m {
			if k != EntrypointKey {
				out = append(out, k)
			}
		}
		slices.Sort(out)
		return out
	}
	cm, _ = pruneConfigData(cm, desiredConfigData(rb, b), []string{a, a})
	if got, want := keys(cm), []string{ConfigKey(a), ConfigKey(b)}; !slices.Equal(got, want) && !slices.Equal(got, []string{want[1], want[0]}) {
		t.Fatalf("pass 1 keys %v", got)
	}
	cm, dropped := pruneConfigData(cm, desiredConfigData(rb, b), []string{b, b})
	if got := keys(cm); !slices.Equal(got, []string{ConfigKey(b)}) || !slices.Equal(dropped, []string{ConfigKey(a)}) {
		t.Fatalf("pass 2 keys %v, dropped %v", got, dropped)
	}
}

func TestRollingTargets(t *testing.T) {
	pods := func(spec string) []podView { // "n" = new & ready, "u" = new & unready, "o" = old & ready, "x" = old & unready
		var out []podView
		for i, c := range spec {
			out = append(out, podView{Name: fmt.Sprintf("p-%d", i), Ordinal: i,
				Suffix: map[bool]string{true: "new", false: "old"}[c == 'n' || c == 'u'], Ready: c == 'n' || c == 'o'})
		}
		return out
	}
	for _, tc := range []struct {
		pods                string
		concurrent, settled bool
		want                []string
	}{
		{"ooo", true, false, []string{"p-0", "p-1", "p-2"}}, // live ignores predecessors and patches all
		{"nox", true, false, []string{"p-1", "p-2"}},
		{"nnn", true, true, nil},
		{"ooo", false, false, nil}, // fixed: predecessors not settled
		{"ooo", false, true, []string{"p-0"}},
		{"uoo", false, true, nil}, // p-0 not Ready on the new suffix yet
		{"noo", false, true, []string{"p-1"}},
		{"nnx", false, true, []string{"p-2"}}, // an unready outdated pod is patched too
		{"nnn", false, true, nil},
		{"nun", false, true, nil},
		{"", false, true, nil},
	} {
		got := rollingTargets(pods(tc.pods), "new", tc.concurrent, tc.settled)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%q concurrent=%v settled=%v: got %v, want %v", tc.pods, tc.concurrent, tc.settled, got, tc.want)
		}
	}
}

func TestSettledOn(t *testing.T) {
	now := metav1.NewTime(time.Unix(100, 0))
	views := []podView{{Name: "s-0", Ordinal: 0, Suffix: "d", Ready: true}, {Name: "s-1", Ordinal: 1, Suffix: "d", Ready: true}}
	st := podSetStatusFor(mov1.PodSetStatus{}, 3, 2, "d", views, 0, now)
	if !st.IsReady() || st.ReadyReplicas != 2 || st.ConfigSuffix != "d" || st.ObservedGeneration != 3 {
		t.Fatalf("status %+v", st)
	}
	if !settledOn(&st, 3, "d") {
		t.Errorf("ready on d at generation 3 must be settled")
	}
	for _, c := range []struct {
		gen  int64
		want string
	}{{4, "d"}, {3, "e"}} {
		if settledOn(&st, c.gen, c.want) {
			t.Errorf("settled at generation %d on %s", c.gen, c.want)
		}
	}
	// One pod on an old suffix: not Ready, one ready replica; the transition time moves only on a change.
	later := metav1.NewTime(time.Unix(200, 0))
	views[1].Suffix = "old"
	st2 := podSetStatusFor(st, 3, 2, "d", views, 0, later)
	if st2.IsReady() || st2.ReadyReplicas != 1 || st2.Conditions[0].LastTransitionTime != later {
		t.Errorf("status %+v", st2)
	}
	st3 := podSetStatusFor(st2, 3, 2, "d", views, 0, metav1.NewTime(time.Unix(300, 0)))
	if st3.Conditions[0].LastTransitionTime != later {
		t.Errorf("transition time moved without a transition: %+v", st3.Conditions[0])
	}
	// An extra pod (scale-in pending) or a missing one keeps the set not Ready; zero replicas is Ready.
	views[1].Suffix = "d"
	extra, missing := podSetStatusFor(st, 3, 2, "d", views, 1, now), podSetStatusFor(st, 3, 3, "d", views, 0, now)
	if extra.IsReady() || missing.IsReady() {
		t.Errorf("extra or missing pods must not be Ready")
	}
	if zero := podSetStatusFor(mov1.PodSetStatus{}, 1, 0, "d", nil, 0, now); !zero.IsReady() {
		t.Errorf("zero replicas must be Ready")
	}
}

// TestRestartOrderSimulation runs the rolling-restart decision of three components (LogSet, DNSet, ProxySet,
// two pods each) against a model kubelet in which a patched pod is Ready again one step later, and checks
// the order: live restarts everything in the first step; fixed restarts one pod per step, component after
// component.
func TestRestartOrderSimulation(t *testing.T) {
	type comp struct {
		name string
		pods []podView
	}
	newComps := func() []*comp {
		var cs []*comp
		for _, n := range []string{"log", "dn", "proxy"} {
			cs = append(cs, &comp{name: n, pods: []podView{{Name: n + "-0", Ordinal: 0, Suffix: "old", Ready: true},
				{Name: n + "-1", Ordinal: 1, Suffix: "old", Ready: true}}})
		}
		return cs
	}
	settled := func(c *comp) bool {
		for _, p := range c.pods {
			if p.Suffix != "new" || !p.Ready {
				return false
			}
		}
		return true
	}
	run := func(concurrent bool) [][]string {
		cs := newComps()
		var steps [][]string
		for range 30 {
			var patched []string
			pending := map[string]bool{}
			for i, c := range cs {
				prev := true
				for _, p := range cs[:i] {
					prev = prev && settled(p)
				}
				for _, name := range rollingTargets(c.pods, "new", concurrent, prev) {
					patched = append(patched, name)
					pending[name] = true
				}
			}
			// Kubelet: patched pods restart (not Ready) now; pods patched in an earlier step are Ready again.
			for _, c := range cs {
				for j := range c.pods {
					p := &c.pods[j]
					if pending[p.Name] {
						p.Suffix, p.Ready = "new", false
					} else {
						p.Ready = true
					}
				}
			}
			if len(patched) > 0 {
				steps = append(steps, patched)
			}
			if settled(cs[0]) && settled(cs[1]) && settled(cs[2]) {
				break
			}
		}
		return steps
	}
	if got := run(true); len(got) != 1 || len(got[0]) != 6 {
		t.Errorf("live: steps %v, want every pod in the first step", got)
	}
	got := run(false)
	want := [][]string{{"log-0"}, {"log-1"}, {"dn-0"}, {"dn-1"}, {"proxy-0"}, {"proxy-1"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("fixed: steps %v, want %v", got, want)
	}
}

func TestInPlaceUpdateDone(t *testing.T) {
	pod := func(suffix, state string, restarts int32) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationConfigSuffix: suffix}},
			Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "main", RestartCount: restarts}}}}
		if state != "" {
			p.Annotations[AnnotationInPlaceUpdateState] = state
		}
		return p
	}
	for _, tc := range []struct {
		p    *corev1.Pod
		want bool
	}{
		{pod("a", "", 0), true}, // created on its suffix
		{pod("b", `{"configSuffix":"b","restartCount":2}`, 2), false}, // patched, kubelet not there yet
		{pod("b", `{"configSuffix":"b","restartCount":2}`, 3), true},  // restarted since
		{pod("c", `{"configSuffix":"b","restartCount":2}`, 2), true},  // state of another suffix: ignored
		{pod("b", `not json`, 0), true},
	} {
		if got := inPlaceUpdateDone(tc.p); got != tc.want {
			t.Errorf("%v: got %v, want %v", tc.p.Annotations, got, tc.want)
		}
	}
}
