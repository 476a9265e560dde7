package defectmatrix

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/onsi/ginkgo/v2/types"

	"github.com/ensembletest/ensemble/internal/ginkgoreport"
	"github.com/ensembletest/ensemble/internal/textout"
	"github.com/ensembletest/ensemble/pins"
)

// Node is one node of the suite as its dry run reports it: an It spec, or a suite node such as
// "[AfterSuite]", which runs whatever the label filter.
type Node struct {
	// Name is ginkgoreport.Name of the node: an It's full text, a suite node's type in brackets.
	Name string
	// Labels are an It's labels, its containers' included; none for a suite node.
	Labels []string
	// Suite says the node is a suite node (BeforeSuite, AfterSuite, ReportAfterSuite, ...).
	Suite bool
}

// Index is the suite's nodes in the dry run's order.
type Index []Node

// index lists the nodes of a dry run's reports, each name once (a suite has several "[DeferCleanup (Suite)]").
func index(reports []types.Report) Index {
	var out Index
	for _, r := range reports {
		for _, sr := range r.SpecReports {
			n := Node{Name: ginkgoreport.Name(sr), Suite: sr.LeafNodeType != types.NodeTypeIt}
			if slices.ContainsFunc(out, func(o Node) bool { return o.Name == n.Name }) {
				continue
			}
			if !n.Suite {
				n.Labels = sr.Labels()
			}
			out = append(out, n)
		}
	}
	return out
}

// find returns the node the catalog's spec name names, and false when the suite has none.
func (x Index) find(spec string) (Node, bool) {
	name := nodeName(spec)
	for _, n := range x {
		if n.Name == name {
			return n, true
		}
	}
	return Node{}, false
}

// suiteNodeTypes are the suite nodes a catalog spec can name, as "AfterSuite: what it checks".
var suiteNodeTypes = []types.NodeType{types.NodeTypeBeforeSuite, types.NodeTypeAfterSuite,
	types.NodeTypeSynchronizedBeforeSuite, types.NodeTypeSynchronizedAfterSuite}

// nodeName turns a catalog spec name into the name ginkgoreport.Name gives its node: a spec's full text is
// its own name; "AfterSuite: the sentinel cluster is unchanged" names the suite's one AfterSuite node,
// "[AfterSuite]" (Ginkgo allows one per suite and gives it no text, so the catalog says what it checks).
func nodeName(spec string) string {
	for _, t := range suiteNodeTypes {
		if strings.HasPrefix(spec, t.String()+": ") {
			return "[" + t.String() + "]"
		}
	}
	return spec
}

// Plan is what the matrix runs for one catalog entry.
type Plan struct {
	ID      string
	Default pins.State
	// Flip is the state the entry's run gives it: the opposite of Default.
	Flip pins.State
	// Specs are the entry's specs as the catalog names them; Missing those the suite has no node of.
	Specs, Missing []string
	// Filter is the Ginkgo label filter of the entry's run: the operator labels its specs carry, "" for the
	// whole suite (a spec with no operator label, or only suite nodes).
	Filter string
}

// Runnable says at least one of the entry's specs is in the suite.
func (p Plan) Runnable() bool { return len(p.Missing) < len(p.Specs) }

// Defects is the ENSEMBLE_DEFECTS value of the entry's run.
func (p Plan) Defects() string { return p.ID + "=" + string(p.Flip) }

// plan finds d's specs in the suite and the label filter that runs them with the rest of their operators'
// specs: operators are the labels that name an operator (multigres, matrixone).
func plan(d pins.Defect, x Index, operators []string) Plan {
	p := Plan{ID: d.ID, Default: d.Default, Flip: pins.Live, Specs: d.Specs}
	if d.Default == pins.Live {
		p.Flip = pins.Fixed
	}
	var labels []string
	whole := false
	for _, s := range d.Specs {
		n, ok := x.find(s)
		if !ok {
			p.Missing = append(p.Missing, s)
			continue
		}
		if n.Suite {
			continue // a suite node runs whatever the filter
		}
		var ops []string
		for _, l := range n.Labels {
			if slices.Contains(operators, l) {
				ops = append(ops, l)
			}
		}
		whole = whole || len(ops) == 0
		for _, l := range ops {
			if !slices.Contains(labels, l) {
				labels = append(labels, l)
			}
		}
	}
	if !whole && len(labels) > 0 {
		slices.Sort(labels)
		p.Filter = strings.Join(labels, " || ")
	}
	return p
}

// baselineFilter is the label filter of the unflipped run: every runnable plan's labels, "" for the whole
// suite when one plan runs it.
func baselineFilter(plans []Plan) string {
	var labels []string
	for _, p := range plans {
		if !p.Runnable() {
			continue
		}
		if p.Filter == "" {
			return ""
		}
		for _, l := range strings.Split(p.Filter, " || ") {
			if !slices.Contains(labels, l) {
				labels = append(labels, l)
			}
		}
	}
	slices.Sort(labels)
	return strings.Join(labels, " || ")
}

// States maps node names to the state each had in one run (ginkgoreport.Name of each node).
type States map[string]types.SpecState

// states reads the node states of a run's reports; of nodes that share a name, a failed one wins.
func states(reports []types.Report) States {
	out := States{}
	for _, r := range reports {
		for _, sr := range r.SpecReports {
			n := ginkgoreport.Name(sr)
			if prev, ok := out[n]; !ok || verdict(prev) != failed {
				out[n] = sr.State
			}
		}
	}
	return out
}

// The three verdicts a node can have in a run. A node absent from a run's report did not run.
const (
	passed = "passed"
	failed = "failed"
	notRun = "not run"
)

// verdict is the state's verdict: failed for every failure state (failed, panicked, timedout, aborted,
// interrupted), not run for skipped, pending and an absent node.
func verdict(st types.SpecState) string {
	switch {
	case st == types.SpecStatePassed:
		return passed
	case st.Is(types.SpecStateFailureStates):
		return failed
	default:
		return notRun
	}
}

// show prints a state the way the table does: Ginkgo's name for it, "not run" for an absent node.
func show(st types.SpecState) string {
	if st == types.SpecStateInvalid {
		return notRun
	}
	return st.String()
}

// SpecResult is what became of one of the entry's own specs.
type SpecResult struct {
	// Spec is the spec as the catalog names it.
	Spec string
	// Unflipped and Flipped are its states in the baseline and in the entry's run ("not run" when absent,
	// empty when not judged).
	Unflipped, Flipped string
	// Changed says its verdict changed; the entry's flip is detected by it.
	Changed bool
	// Note says why an unchanged verdict does not count: "not in the suite", "not judged" (no run to
	// compare; Unflipped and Flipped are empty), "failing unflipped", "not run unflipped", "not run flipped";
	// empty otherwise.
	Note string `json:",omitempty"`
}

// Change is a node outside the entry's specs whose verdict differs between the baseline and the entry's run.
type Change struct {
	Spec, Unflipped, Flipped string
}

// Row is the matrix's line for one catalog entry.
type Row struct {
	ID      string
	Default pins.State
	Flip    pins.State
	// Filter is the label filter the entry's run used ("" for the whole suite).
	Filter string `json:",omitempty"`
	Specs  []SpecResult
	// Detected says at least one of the entry's own specs changed verdict.
	Detected bool
	Others   []Change
	// Error says why the entry could not be judged: no spec of the suite named, a run without a report.
	Error string `json:",omitempty"`
}

// judge compares the entry's run with the baseline: its own specs one by one, then every other node its
// label filter selects (suite nodes always) whose verdict changed.
func judge(p Plan, x Index, base, flipped States) (Row, error) {
	row := Row{ID: p.ID, Default: p.Default, Flip: p.Flip, Filter: p.Filter}
	selects, err := types.ParseLabelFilter(p.Filter)
	if err != nil {
		return row, fmt.Errorf("%s: label filter %q: %w", p.ID, p.Filter, err)
	}
	own := map[string]bool{}
	for _, s := range p.Specs {
		res := SpecResult{Spec: s}
		if slices.Contains(p.Missing, s) {
			res.Note = "not in the suite"
			row.Specs = append(row.Specs, res)
			continue
		}
		name := nodeName(s)
		own[name] = true
		before, after := base[name], flipped[name]
		res.Unflipped, res.Flipped = show(before), show(after)
		switch {
		case verdict(before) == failed:
			res.Note = "failing unflipped"
		case verdict(before) == notRun:
			res.Note = "not run unflipped"
		case verdict(after) == notRun:
			res.Note = "not run flipped"
		default:
			res.Changed = verdict(before) != verdict(after)
		}
		row.Detected = row.Detected || res.Changed
		row.Specs = append(row.Specs, res)
	}
	for _, n := range x {
		if own[n.Name] || !(n.Suite || selects(n.Labels)) {
			continue
		}
		if before, after := base[n.Name], flipped[n.Name]; verdict(before) != verdict(after) {
			row.Others = append(row.Others, Change{Spec: n.Name, Unflipped: show(before), Flipped: show(after)})
		}
	}
	return row, nil
}

// unjudged is the row of an entry whose run could not be compared with the baseline, and why: none of its
// specs is in the suite, or its run wrote no report.
func unjudged(p Plan, why string) Row {
	row := Row{ID: p.ID, Default: p.Default, Flip: p.Flip, Filter: p.Filter, Error: why}
	for _, s := range p.Specs {
		res := SpecResult{Spec: s, Note: "not judged"}
		if slices.Contains(p.Missing, s) {
			res.Note = "not in the suite"
		}
		row.Specs = append(row.Specs, res)
	}
	return row
}

// missing is why an entry none of whose specs is in the suite has no run.
func missing(p Plan) string {
	return fmt.Sprintf("no spec of the suite is named %q: add the scenario or correct the entry's Specs in the suite's catalog (suite.Options.Pins)",
		strings.Join(p.Missing, `", "`))
}

// undetected lists the rows whose entry flipped none of its own specs, each as "ID (why)".
func undetected(rows []Row) []string {
	var out []string
	for _, r := range rows {
		if r.Detected {
			continue
		}
		why := r.Error
		if why == "" {
			var notes []string
			for _, s := range r.Specs {
				n := s.Note
				if n == "" {
					n = "verdict " + s.Flipped + " both ways"
				}
				notes = append(notes, n)
			}
			why = strings.Join(notes, "; ")
		}
		out = append(out, fmt.Sprintf("%s (%s)", r.ID, why))
	}
	return out
}

// specWidth is how many characters of a spec's name the table shows; the JSON file has them whole.
const specWidth = 60

// table prints the matrix, one row per entry and one line per own spec or other change, columns aligned:
// ID | default | its specs | flipped? | other specs that flipped. Spec names longer than specWidth are cut.
func table(w io.Writer, rows []Row) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tdefault\tits specs\tflipped?\tother specs that flipped")
	for _, r := range rows {
		var specs, flips, others []string
		for _, s := range r.Specs {
			specs = append(specs, textout.Cut(s.Spec, specWidth))
			switch {
			case s.Changed:
				flips = append(flips, fmt.Sprintf("yes: %s -> %s", s.Unflipped, s.Flipped))
			case s.Unflipped == "":
				flips = append(flips, "no: "+s.Note)
			case s.Note != "":
				flips = append(flips, fmt.Sprintf("no: %s (%s -> %s)", s.Note, s.Unflipped, s.Flipped))
			default:
				flips = append(flips, "no: "+s.Flipped+" both ways")
			}
		}
		for _, c := range r.Others {
			others = append(others, fmt.Sprintf("%s: %s -> %s", textout.Cut(c.Spec, specWidth), c.Unflipped, c.Flipped))
		}
		switch {
		case r.Error != "" && len(others) == 0:
			others = []string{"(not judged)"}
		case len(others) == 0:
			others = []string{"none"}
		}
		for i := 0; i < max(len(specs), len(others)); i++ {
			id, def := "", ""
			if i == 0 {
				id, def = r.ID, string(r.Default)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", id, def, at(specs, i), at(flips, i), at(others, i))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range rows {
		if r.Error != "" {
			if _, err := fmt.Fprintf(w, "error: %s: %s\n", r.ID, r.Error); err != nil {
				return err
			}
		}
	}
	return nil
}

// at is s[i], or "" past its end.
func at(s []string, i int) string {
	if i < len(s) {
		return s[i]
	}
	return ""
}
