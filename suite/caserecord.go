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

// perturbationEnv reads the variables make explore and make mutate drive a run with: ENSEMBLE_PERTURB (the runs of
// each spec and the points set on each run's case, perturb.ParseRuns's form), ENSEMBLE_BASELINE (directories of unperturbed runs' records,
// separated by the OS path list separator, for the differential oracle), ENSEMBLE_EXPLORE (the
// directory each case writes its record to) and ENSEMBLE_MUTANTS for its count of runs (mutant.Env, make
// mutate's: a mutant a run, each unperturbed). A point's writer is not checked against the managers here: a
// spec may start the instance it names (Suite.StartManager). A point that never fires is "not reached" in make
// explore's table; one whose writer names nothing that exists at the case's cleanup fails the case (see
// Case.reportPoints). Errors: the two variables asking for different counts of runs, a point that does not parse or names an external system the suite lacks, a baseline directory that cannot be read or holds no record, a record that does
// not parse, an explore directory that cannot be made.
func (s *Suite) perturbationEnv() error {
	runs, err := perturb.ParseRuns(os.Getenv("ENSEMBLE_PERTURB"))
	if err != nil {
		return fmt.Errorf("suite: ENSEMBLE_PERTURB: %w", err)
	}
	n, err := runCount()
	if err != nil {
		return err
	}
	// ENSEMBLE_MUTANTS may ask for more runs than ENSEMBLE_PERTURB's one (make mutate sets no point): each
	// run gets that one's points.
	for len(runs) < n {
		runs = append(runs, runs[0])
	}
	for _, points := range runs {
		for _, p := range points {
			if err := s.checkPoint(p); err != nil {
				return fmt.Errorf("suite: ENSEMBLE_PERTURB: point %s: %w", p, err)
			}
		}
	}
	s.runs = runs
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
		if len(s.baselines) == 0 {
			// An unperturbed run's records are what make explore enumerates and prunes from: note reads.
			s.reads = newReadLog()
		}
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

// writeRecord writes the case's perturb.Record to ENSEMBLE_EXPLORE's directory.
// specFailed says the test had failed when the cleanup began (perturb.Record.SpecFailed).
func (c *Case) writeRecord(points, firedAt []string, end map[string]map[string]string, failures []string, specFailed bool) error {
	r := perturb.Record{Spec: c.t.Name(), Namespace: c.Namespace, Run: c.run, Started: c.Started, Ended: time.Now(), Points: points, Fired: firedAt,
		EndState: end, Failed: c.t.Failed() || len(failures) > 0, SpecFailed: specFailed, Writes: []perturb.RecordWrite{}}
	for name := range c.s.externals {
		r.Externals = append(r.Externals, name)
	}
	sort.Strings(r.Externals)
	// rv is the resourceVersion each object's last recorded write answered with: a write that answers with
	// it again changed nothing.
	rv := map[string]string{}
	for _, w := range c.Writes(WriteFilter{IncludeRejected: true}) {
		if w.answer() {
			// An admission is part of the write it admitted, a conversion part of a read.
			continue
		}
		noop := false
		if id := w.Kind + "/" + w.Namespace + "/" + w.Name; w.Err == nil && w.ResourceVersion != "" {
			noop = rv[id] == w.ResourceVersion
			rv[id] = w.ResourceVersion
		}
		// An object's name carries the case's namespace as perturb.CaseNamespace, so a point made from this
		// record names the same object in a run of another namespace (a cluster-scoped object named after
		// its case's namespace, such as a Node).
		rw := perturb.RecordWrite{Writer: w.writer(), Object: w.Kind + "/" + perturb.RelativeName(w.Name, c.Namespace),
			Verb: string(w.Verb), Subresource: w.Subresource, Rejected: w.Err != nil, At: w.Time, NoOp: noop}
		if w.Manager == caseManager || w.audited {
			// A write read from the audit log (kube-controller-manager's) and the spec's own are no point's to
			// answer: exploring them would only propose points that never fire. The pruning reads them.
			r.Others = append(r.Others, rw)
			continue
		}
		r.Writes = append(r.Writes, rw)
	}
	if c.s.reads != nil {
		r.ReadsRecorded, r.Reads = true, c.s.reads.take(c.Namespace, c.Started)
		for name, e := range c.s.externals {
			if e.Calls == nil {
				continue
			}
			if r.Calls == nil {
				r.Calls = map[string][]time.Time{}
			}
			r.Calls[name] = []time.Time{}
			for _, t := range e.Calls(c.Namespace) {
				if !t.Before(c.Started) {
					r.Calls[name] = append(r.Calls[name], t)
				}
			}
		}
	}
	r.Changes, r.Seen, r.ChangeTimes = map[string]int{}, map[string]map[string]int{}, map[string][]time.Time{}
	watching := c.s.watchingSince()
	for _, ch := range c.s.stream.changes(c.Namespace, ChangeFilter{}) {
		obj := ch.Kind + "/" + perturb.RelativeName(ch.Name, c.Namespace)
		r.Changes[obj]++
		r.ChangeTimes[obj] = append(r.ChangeTimes[obj], ch.Time)
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
	file := fmt.Sprintf("%s-%08x.json", name, h.Sum32())
	if c.run > 1 {
		file = fmt.Sprintf("%s-%08x-run%d.json", name, h.Sum32(), c.run)
	}
	return errors.Join(os.WriteFile(filepath.Join(c.s.exploreDir, file), b, 0o644))
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
			if t, ok := kinds[in.kind.Kind]; !in.since.IsZero() && (!ok || in.since.Before(t)) {
				kinds[in.kind.Kind] = in.since
			}
		}
		m.holds.mu.Unlock()
		out[m.Name] = kinds
	}
	return out
}
