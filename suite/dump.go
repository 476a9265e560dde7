package suite

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/yaml"
)

// Dumper adds a section to failure dumps (Options.Dumpers): a fake's log for the namespace, for instance.
// It returns the section's file name (e.g. "pooler.log") and content.
type Dumper func(namespace string) (name, content string)

// dump writes everything known about namespace ns since `since` under
// Options.ArtifactsDir/<spec>-<namespace>/: objects.yaml (the watched kinds, with managedFields), events.txt
// (Kubernetes events), changes.txt (the event stream), writes.txt (the recorder's op log), passes.txt
// (reconcile passes) and one file per Dumper. It returns the directory and a short summary (counts, the
// last writes and passes). Errors: the directory cannot be written.
func (s *Suite) dump(ns, spec string, since time.Time) (string, string, error) {
	dir := s.caseArtifacts(ns, spec)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", fmt.Errorf("suite: dump: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var objs strings.Builder
	nObjs := 0
	write := func(o map[string]any) {
		b, _ := yaml.Marshal(o)
		objs.WriteString("---\n")
		objs.Write(b)
		nObjs++
	}
	// Cluster-scoped objects: those of the watched kinds no Case claimed (the cluster all specs share,
	// such as Nodes) and every object this case claimed, never another case's.
	watched := map[string]bool{}
	for _, k := range s.watchKinds {
		gvk, err := apiutil.GVKForObject(k, s.scheme)
		if err != nil {
			continue
		}
		watched[gvk.Kind] = true
		l := &unstructured.UnstructuredList{}
		l.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		opts := []client.ListOption{}
		namespaced, _ := s.Client.IsObjectNamespaced(k)
		if namespaced {
			opts = append(opts, client.InNamespace(ns))
		}
		if err := s.Client.List(ctx, l, opts...); err != nil {
			fmt.Fprintf(&objs, "# %s: %v\n", gvk.Kind, err)
			continue
		}
		for _, item := range l.Items {
			if scope := s.rec.scopes.of(gvk.Kind, item.GetNamespace(), item.GetName()); namespaced || scope == "" || scope == ns {
				write(item.Object)
			}
		}
	}
	for _, cl := range s.rec.scopes.claimed(ns) {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(cl.gvk)
		if !watched[cl.gvk.Kind] && s.Client.Get(ctx, client.ObjectKey{Name: cl.name}, u) == nil {
			write(u.Object)
		}
	}
	var events strings.Builder
	el := &corev1.EventList{}
	if err := s.Client.List(ctx, el, client.InNamespace(ns)); err == nil {
		for _, e := range el.Items {
			fmt.Fprintf(&events, "%s %s %s/%s %s: %s (x%d)\n", e.LastTimestamp.Format(time.RFC3339), e.Type, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message, e.Count)
		}
	}
	changes := s.stream.changes(ns, ChangeFilter{Since: since})
	writes := s.rec.writes(ns, WriteFilter{Since: since, IncludeRejected: true, conversions: true})
	passes := s.rec.allPasses(ns, since)
	files := map[string]string{
		"objects.yaml": objs.String(),
		"events.txt":   events.String(),
		"changes.txt":  joinLines(changes, Change.String),
		"writes.txt":   joinLines(writes, Write.line),
		"passes.txt":   joinLines(passes, Pass.line),
	}
	if s.kcmLog != nil {
		files["kube-controller-manager.log"] = s.kcmLog.mentioning(ns)
	}
	for _, d := range s.dumpers {
		name, content := d(ns)
		files[name] = content
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return "", "", fmt.Errorf("suite: dump: %w", err)
		}
	}
	summary := fmt.Sprintf("  %d objects, %d changes, %d writes (%d rejected), %d passes\n  last writes:\n%s\n  last passes:\n%s",
		nObjs, len(changes), len(writes), countRejected(writes), len(passes), indent(lastLines(writes, 5, Write.line)), indent(lastLines(passes, 5, Pass.line)))
	return dir, summary, nil
}

// ArtifactsDir is the directory the case's failure dump, timeline and pin reports go to,
// Options.ArtifactsDir/<spec>-<namespace>. Nothing creates it before one of those is written. A test that
// makes a case fail on purpose (a verdict probe) removes it once it has read the verdict, so a passing run
// leaves no dump.
func (c *Case) ArtifactsDir() string { return c.s.caseArtifacts(c.Namespace, c.t.Name()) }

// caseArtifacts is the directory of a case's artifacts: Options.ArtifactsDir/<spec>-<namespace>. A spec
// whose name would make the directory's name longer than a file system takes (maxDirName bytes) is cut
// there and ends with the first 8 hex digits of its whole name's SHA-256, so two long specs that share a
// beginning still get directories of their own.
func (s *Suite) caseArtifacts(ns, spec string) string {
	name := strings.Trim(nonDNS.ReplaceAllString(strings.ToLower(spec), "-"), "-")
	if name == "" {
		// A case made outside a test (a suite-level case such as a sentinel's) is named by its namespace.
		return filepath.Join(s.artifactsDir, ns)
	}
	if room := maxDirName - len(ns) - 1; len(name) > room {
		sum := sha256.Sum256([]byte(name))
		name = strings.TrimRight(name[:room-9], "-") + "-" + hex.EncodeToString(sum[:4])
	}
	return filepath.Join(s.artifactsDir, name+"-"+ns)
}

// maxDirName is the longest name of a case's artifacts directory, in bytes: 255 is NAME_MAX on Linux and
// macOS file systems.
const maxDirName = 255

func countRejected(ws []Write) int {
	n := 0
	for _, w := range ws {
		if w.Err != nil {
			n++
		}
	}
	return n
}

// joinLines renders each element on a line of its own.
func joinLines[T any](xs []T, line func(T) string) string {
	var b strings.Builder
	for _, x := range xs {
		b.WriteString(line(x) + "\n")
	}
	return b.String()
}

// lastLines renders the last n elements, one line each.
func lastLines[T any](xs []T, n int, line func(T) string) []string {
	if len(xs) > n {
		xs = xs[len(xs)-n:]
	}
	var out []string
	for _, x := range xs {
		out = append(out, line(x))
	}
	return out
}
