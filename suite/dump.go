package suite

import (
	"context"
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

// Dumper adds a section to failure dumps: a fake's log for the namespace, for instance. It returns the
// section's file name (e.g. "pooler.log") and content.
type Dumper func(namespace string) (name, content string)

// AddDumper registers d; every later dump includes its section.
func (s *Suite) AddDumper(d Dumper) {
	s.mu.Lock()
	s.dumpers = append(s.dumpers, d)
	s.mu.Unlock()
}

// Dump writes everything known about namespace ns since `since` under
// Options.ArtifactsDir/<spec>-<namespace>/: objects.yaml (the watched kinds, with managedFields), events.txt
// (Kubernetes events), changes.txt (the event stream), writes.txt (the recorder's op log), passes.txt
// (reconcile passes) and one file per Dumper. It returns the directory and a short summary (counts, the
// last writes and passes). Errors: the directory cannot be written.
func (s *Suite) Dump(ns, spec string, since time.Time) (string, string, error) {
	dir := filepath.Join(s.opts.ArtifactsDir, strings.Trim(nonDNS.ReplaceAllString(strings.ToLower(spec), "-"), "-")+"-"+ns)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", fmt.Errorf("suite: dump: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var objs strings.Builder
	nObjs := 0
	for _, k := range s.opts.WatchKinds {
		gvk, err := apiutil.GVKForObject(k, s.opts.Scheme)
		if err != nil {
			continue
		}
		l := &unstructured.UnstructuredList{}
		l.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		opts := []client.ListOption{}
		if ok, _ := s.Client.IsObjectNamespaced(k); ok {
			opts = append(opts, client.InNamespace(ns))
		}
		if err := s.Client.List(ctx, l, opts...); err != nil {
			fmt.Fprintf(&objs, "# %s: %v\n", gvk.Kind, err)
			continue
		}
		for _, item := range l.Items {
			b, _ := yaml.Marshal(item.Object)
			objs.WriteString("---\n")
			objs.Write(b)
			nObjs++
		}
	}
	var events strings.Builder
	el := &corev1.EventList{}
	if err := s.Client.List(ctx, el, client.InNamespace(ns)); err == nil {
		for _, e := range el.Items {
			fmt.Fprintf(&events, "%s %s %s/%s %s: %s (x%d)\n", e.LastTimestamp.Format(time.RFC3339), e.Type, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message, e.Count)
		}
	}
	changes := s.stream.Changes(ChangeFilter{Namespace: ns, Since: since})
	writes := s.rec.Writes(WriteFilter{Namespace: ns, Since: since})
	passes := s.rec.Passes(PassFilter{Namespace: ns, Since: since})
	files := map[string]string{
		"objects.yaml": objs.String(),
		"events.txt":   events.String(),
		"changes.txt":  joinLines(changes),
		"writes.txt":   joinLines(writes),
		"passes.txt":   joinLines(passes),
	}
	s.mu.Lock()
	dumpers := append([]Dumper(nil), s.dumpers...)
	s.mu.Unlock()
	for _, d := range dumpers {
		name, content := d(ns)
		files[name] = content
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return "", "", fmt.Errorf("suite: dump: %w", err)
		}
	}
	summary := fmt.Sprintf("  %d objects, %d changes, %d writes (%d rejected), %d passes\n  last writes:\n%s\n  last passes:\n%s",
		nObjs, len(changes), len(writes), countRejected(writes), len(passes), indent(lastLines(writes, 5)), indent(lastLines(passes, 5)))
	return dir, summary, nil
}

func countRejected(ws []Write) int {
	n := 0
	for _, w := range ws {
		if w.Rejected() {
			n++
		}
	}
	return n
}

func joinLines[T fmt.Stringer](xs []T) string {
	var b strings.Builder
	for _, x := range xs {
		b.WriteString(x.String() + "\n")
	}
	return b.String()
}

func lastLines[T fmt.Stringer](xs []T, n int) []string {
	if len(xs) > n {
		xs = xs[len(xs)-n:]
	}
	var out []string
	for _, x := range xs {
		out = append(out, x.String())
	}
	return out
}
