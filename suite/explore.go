package suite

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/ensembletest/ensemble/suite/perturb"
)

// perturbationEnv reads the three variables make explore drives a run with: ENSEMBLE_PERTURB (points set
// on every spec's case, perturb.ParseList's form), ENSEMBLE_BASELINE (directories of unperturbed runs' records,
// separated by the OS path list separator, for the differential oracle) and ENSEMBLE_EXPLORE (the
// directory each case writes its record to). A point's writer is not checked against the managers here: a
// spec may start the instance it names (Suite.StartManager). A point that never fires is "not reached" in make
// explore's table; one whose writer names nothing that exists at the case's cleanup fails the case (see
// Case.reportPoints). Errors: a point that does not parse or names an external system the suite lacks, a baseline directory that cannot be read or holds no record, a record that does
// not parse, an explore directory that cannot be made.
func (s *Suite) perturbationEnv() error {
	points, err := perturb.ParseList(os.Getenv("ENSEMBLE_PERTURB"))
	if err != nil {
		return fmt.Errorf("suite: ENSEMBLE_PERTURB: %w", err)
	}
	for _, p := range points {
		if err := s.checkPoint(p); err != nil {
			return fmt.Errorf("suite: ENSEMBLE_PERTURB: point %s: %w", p, err)
		}
	}
	s.runPoints = points
	if dirs := os.Getenv("ENSEMBLE_BASELINE"); dirs != "" {
		s.baselines = map[string][]map[string]map[string]string{}
		for _, dir := range filepath.SplitList(dirs) {
			recs, err := readRecords(dir)
			if err != nil {
				return fmt.Errorf("suite: ENSEMBLE_BASELINE: %w (it names directories that ENSEMBLE_EXPLORE wrote in unperturbed runs)", err)
			}
			for _, r := range recs {
				s.baselines[r.Spec] = append(s.baselines[r.Spec], r.EndState)
			}
		}
	}
	if dir := os.Getenv("ENSEMBLE_EXPLORE"); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("suite: ENSEMBLE_EXPLORE: %w", err)
		}
		s.exploreDir = dir
	}
	return nil
}

// readRecords reads every record in dir. Errors: perturb.ReadRecords's, or a directory with no record.
func readRecords(dir string) ([]perturb.Record, error) {
	recs, err := perturb.ReadRecords(dir)
	if err == nil && len(recs) == 0 {
		err = fmt.Errorf("no case record (*.json) in %s", dir)
	}
	return recs, err
}

// endState reads the case's objects (the watched kinds) as the differential oracle compares them: "Kind/name"
// to flattened leaf fields, the namespace written as "<namespace>", objects made with generateName keyed
// "Kind/<generateName>*<i>" in the order of their content (their random suffixes differ from run to run).
func (c *Case) endState() map[string]map[string]string {
	out := map[string]map[string]string{}
	generated := map[string][]map[string]string{}
	for _, o := range c.leftovers() {
		fields := map[string]string{}
		for path, v := range flatten(o) {
			fields[path] = strings.ReplaceAll(v, c.Namespace, "<namespace>")
		}
		kind := o.GetObjectKind().GroupVersionKind().Kind
		if g := o.GetGenerateName(); g != "" {
			generated[kind+"/"+g+"*"] = append(generated[kind+"/"+g+"*"], fields)
			continue
		}
		out[kind+"/"+o.GetName()] = fields
	}
	for key, objs := range generated {
		sort.Slice(objs, func(i, j int) bool { return contentKey(objs[i]) < contentKey(objs[j]) })
		for i, f := range objs {
			out[fmt.Sprintf("%s%d", key, i)] = f
		}
	}
	return out
}

// contentKey renders fields without the volatile ones and the name, to order generated objects by content.
func contentKey(fields map[string]string) string {
	var parts []string
	for p, v := range fields {
		if !perturb.Volatile(p) {
			parts = append(parts, p+"="+v)
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, "\n")
}

// differentialErrors compares the case's end state with the unperturbed runs' of the same spec
// (ENSEMBLE_BASELINE) and renders the differences; none without a baseline for the spec, and none (with a
// report entry) for a case that opted out of Convergence, whose end state is not a settled one.
func (c *Case) differentialErrors(end map[string]map[string]string) []string {
	base := c.s.baselines[c.t.Name()]
	if len(base) == 0 || c.optedOut(Differential) {
		return nil
	}
	if c.optedOut(Convergence) {
		// A case that need not settle has no end state to compare: what it holds depends on when the spec
		// ended, perturbed or not.
		c.report("differential", "not judged: the case opted out of "+string(Convergence)+", so its end state is not a settled one")
		return nil
	}
	var diff []string
	for _, d := range perturb.Diff(base, end) {
		if !c.differenceAllowed(d) {
			diff = append(diff, d)
		}
	}
	if len(diff) == 0 {
		return nil
	}
	msg := fmt.Sprintf("oracle %s: the end state differs from the unperturbed run's in %d fields:\n%s", Differential, len(diff), indent(diff))
	first, _, _ := strings.Cut(msg, "\n")
	c.mark(first)
	return []string{msg}
}

// AllowDifference declares that the field path (or any field under it, as the event stream names fields, e.g.
// "status.podRoles") of the object kind/name may end differently under a perturbation: the spec's operator
// decides it by timing (which pod an election picks, say), so the unperturbed runs agreeing on it says
// nothing. The Differential oracle does not compare it; reason is shown in the spec's report when the oracle
// runs (ENSEMBLE_BASELINE). Without a
// kind, name, path or reason, or with a malformed path, the test fails.
func (c *Case) AllowDifference(kind, name, path, reason string) {
	c.t.Helper()
	if kind == "" || name == "" || path == "" || strings.TrimSpace(reason) == "" {
		c.fatalf("suite: AllowDifference(%q, %q, %q, %q): give the object's kind and name, the field path and why its end value may differ", kind, name, path, reason)
		return
	}
	if err := checkFieldPath(path); err != nil {
		c.fatalf("suite: AllowDifference(%q, %q, %q, ...): %v", kind, name, path, err)
		return
	}
	c.mu.Lock()
	c.differOK = append(c.differOK, kind+"/"+name+" "+path)
	c.mu.Unlock()
	if len(c.s.baselines) > 0 {
		c.report("difference allowed", fmt.Sprintf("%s/%s %s: %s", kind, name, path, reason))
	}
}

// differenceAllowed reports whether a line of perturb.Diff ("Kind/name path: ...") is under a field the spec
// declared with AllowDifference.
func (c *Case) differenceAllowed(line string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ok := range c.differOK {
		if strings.HasPrefix(line, ok+":") || strings.HasPrefix(line, ok+".") || strings.HasPrefix(line, ok+"[") {
			return true
		}
	}
	return false
}

// writeRecord writes the case's perturb.Record to ENSEMBLE_EXPLORE's directory.
func (c *Case) writeRecord(points, firedAt []string, end map[string]map[string]string, failures []string) error {
	r := perturb.Record{Spec: c.t.Name(), Namespace: c.Namespace, Points: points, Fired: firedAt,
		EndState: end, Failed: c.t.Failed() || len(failures) > 0, Writes: []perturb.RecordWrite{}}
	for name := range c.s.externals {
		r.Externals = append(r.Externals, name)
	}
	sort.Strings(r.Externals)
	for _, w := range c.Writes(WriteFilter{}) {
		if w.Manager == caseManager {
			continue
		}
		r.Writes = append(r.Writes, perturb.RecordWrite{Writer: w.writer(), Object: w.Kind + "/" + w.Name,
			Verb: string(w.Verb), Subresource: w.Subresource, Rejected: w.Err != nil})
	}
	r.Changes, r.Seen = map[string]int{}, map[string]map[string]int{}
	watching := c.s.watchingSince()
	for _, ch := range c.s.stream.changes(c.Namespace, ChangeFilter{}) {
		obj := ch.Kind + "/" + ch.Name
		r.Changes[obj]++
		for m, since := range watching {
			if t, ok := since[ch.Kind]; ok && !ch.Time.Before(t) {
				if r.Seen[m] == nil {
					r.Seen[m] = map[string]int{}
				}
				r.Seen[m][obj]++
			}
		}
	}
	for _, f := range failures {
		first, _, _ := strings.Cut(f, "\n")
		r.Failures = append(r.Failures, first)
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(c.t.Name()))
	name := strings.Trim(nonDNS.ReplaceAllString(strings.ToLower(c.t.Name()), "-"), "-")
	if len(name) > 80 {
		name = name[:80]
	}
	return errors.Join(os.WriteFile(filepath.Join(c.s.exploreDir, fmt.Sprintf("%s-%08x.json", name, h.Sum32())), b, 0o644))
}

// watchingSince maps each running manager to the kinds its cache's informers watch and when the first
// watch of each kind began.
func (s *Suite) watchingSince() map[string]map[string]time.Time {
	s.mu.Lock()
	ms := make([]*Manager, 0, len(s.managers))
	for _, m := range s.managers {
		ms = append(ms, m)
	}
	s.mu.Unlock()
	out := map[string]map[string]time.Time{}
	for _, m := range ms {
		kinds := map[string]time.Time{}
		m.holds.mu.Lock()
		for _, in := range m.holds.informers {
			if t, ok := kinds[in.kind]; !in.since.IsZero() && (!ok || in.since.Before(t)) {
				kinds[in.kind] = in.since
			}
		}
		m.holds.mu.Unlock()
		out[m.Name] = kinds
	}
	return out
}
