package defectmatrix

import (
	"reflect"
	"strings"
	"testing"

	"github.com/onsi/ginkgo/v2/types"

	"github.com/ensembletest/ensemble/pins"
)

// it fabricates an It's report: container text and labels, the It's text and labels, its state.
func it(container string, labels []string, text string, state types.SpecState, leafLabels ...string) types.SpecReport {
	return types.SpecReport{LeafNodeType: types.NodeTypeIt, ContainerHierarchyTexts: []string{container},
		ContainerHierarchyLabels: [][]string{labels}, LeafNodeText: text, LeafNodeLabels: leafLabels, State: state}
}

// suiteNode fabricates a suite node's report.
func suiteNode(t types.NodeType, state types.SpecState) types.SpecReport {
	return types.SpecReport{LeafNodeType: t, State: state}
}

var (
	mg, mo, claim = []string{"multigres"}, []string{"matrixone"}, []string{"matrixone", "claim"}
	operators     = []string{"multigres", "matrixone"}
)

// fabricated is a run's reports with these specs' states (in the order of the suite below).
func fabricated(healthy, quiet, isolated, claims, harness, after types.SpecState) []types.Report {
	return []types.Report{{SpecReports: []types.SpecReport{
		suiteNode(types.NodeTypeBeforeSuite, types.SpecStatePassed),
		it("multigres", mg, "becomes Healthy", healthy),
		it("multigres", mg, "is quiet", quiet),
		it("matrixone", mo, "sentinel isolation", isolated, "sentinel"),
		it("matrixone CNClaim", claim, "double binding", claims, "pin"),
		it("harness", []string{"harness"}, "gate refuses", harness),
		suiteNode(types.NodeTypeAfterSuite, after),
	}}}
}

const (
	P = types.SpecStatePassed
	F = types.SpecStateFailed
	S = types.SpecStateSkipped
	T = types.SpecStateTimedout
)

// suite is the dry run of the fabricated suite.
var suite = index(fabricated(P, P, P, P, P, P))

func TestIndexNamesNodesAndLabels(t *testing.T) {
	want := Index{
		{Name: "[BeforeSuite]", Suite: true},
		{Name: "multigres becomes Healthy", Labels: mg},
		{Name: "multigres is quiet", Labels: mg},
		{Name: "matrixone sentinel isolation", Labels: []string{"matrixone", "sentinel"}},
		{Name: "matrixone CNClaim double binding", Labels: []string{"matrixone", "claim", "pin"}},
		{Name: "harness gate refuses", Labels: []string{"harness"}},
		{Name: "[AfterSuite]", Suite: true},
	}
	if !reflect.DeepEqual(suite, want) {
		t.Fatalf("index = %+v\nwant    %+v", suite, want)
	}
}

func TestPlan(t *testing.T) {
	for _, tc := range []struct {
		name          string
		d             pins.Defect
		flip          pins.State
		filter        string
		missing       []string
		runnable      bool
		baselineAlone string
	}{
		{"a fixed multigres entry", pins.Defect{ID: "MG-A", Default: pins.Fixed, Specs: []string{"multigres becomes Healthy", "multigres is quiet"}},
			pins.Live, "multigres", nil, true, "multigres"},
		{"a live claim pin runs every matrixone spec", pins.Defect{ID: "MO-B", Default: pins.Live, Specs: []string{"matrixone CNClaim double binding"}},
			pins.Fixed, "matrixone", nil, true, "matrixone"},
		{"an AfterSuite spec adds no label", pins.Defect{ID: "MO-C", Default: pins.Fixed, Specs: []string{"matrixone sentinel isolation", "AfterSuite: the sentinel is unchanged"}},
			pins.Live, "matrixone", nil, true, "matrixone"},
		{"specs of both operators", pins.Defect{ID: "X-D", Default: pins.Fixed, Specs: []string{"matrixone sentinel isolation", "multigres is quiet"}},
			pins.Live, "matrixone || multigres", nil, true, "matrixone || multigres"},
		{"a spec with no operator label runs the whole suite", pins.Defect{ID: "X-E", Default: pins.Fixed, Specs: []string{"multigres is quiet", "harness gate refuses"}},
			pins.Live, "", nil, true, ""},
		{"only the AfterSuite runs the whole suite", pins.Defect{ID: "X-F", Default: pins.Live, Specs: []string{"AfterSuite: nothing changed"}},
			pins.Fixed, "", nil, true, ""},
		{"a package test is no spec of the suite", pins.Defect{ID: "MO-G", Default: pins.Fixed, Specs: []string{"operators/matrixone TestX (no scenario yet)"}},
			pins.Live, "", []string{"operators/matrixone TestX (no scenario yet)"}, false, ""},
		{"one spec found, one missing", pins.Defect{ID: "MG-H", Default: pins.Fixed, Specs: []string{"multigres is quiet", "multigres gone"}},
			pins.Live, "multigres", []string{"multigres gone"}, true, "multigres"},
		{"BeforeSuite is named like AfterSuite", pins.Defect{ID: "X-I", Default: pins.Fixed, Specs: []string{"BeforeSuite: boots"}},
			pins.Live, "", nil, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := plan(tc.d, suite, operators)
			if p.Flip != tc.flip || p.Filter != tc.filter || !reflect.DeepEqual(p.Missing, tc.missing) || p.Runnable() != tc.runnable {
				t.Errorf("plan = %+v; want flip %s, filter %q, missing %q, runnable %v", p, tc.flip, tc.filter, tc.missing, tc.runnable)
			}
			if p.Defects() != tc.d.ID+"="+string(tc.flip) {
				t.Errorf("Defects() = %q", p.Defects())
			}
			if b := baselineFilter([]Plan{p}); p.Runnable() && b != tc.baselineAlone {
				t.Errorf("baselineFilter = %q, want %q", b, tc.baselineAlone)
			}
		})
	}
}

func TestBaselineFilterJoinsRunnablePlans(t *testing.T) {
	for _, tc := range []struct {
		filters []string
		missing []bool
		want    string
	}{
		{[]string{"multigres", "matrixone", "matrixone"}, []bool{false, false, false}, "matrixone || multigres"},
		{[]string{"multigres", "matrixone || multigres"}, []bool{false, false}, "matrixone || multigres"},
		{[]string{"multigres", ""}, []bool{false, false}, ""},
		// A plan with no spec in the suite does not run, so its "" does not widen the baseline.
		{[]string{"multigres", ""}, []bool{false, true}, "multigres"},
	} {
		var plans []Plan
		for i, f := range tc.filters {
			p := Plan{Specs: []string{"s"}, Filter: f}
			if tc.missing[i] {
				p.Missing = p.Specs
			}
			plans = append(plans, p)
		}
		if got := baselineFilter(plans); got != tc.want {
			t.Errorf("baselineFilter(%q) = %q, want %q", tc.filters, got, tc.want)
		}
	}
}

func TestJudge(t *testing.T) {
	base := states(fabricated(P, P, P, P, P, P))
	quietFails := pins.Defect{ID: "MG-A", Default: pins.Fixed, Specs: []string{"multigres is quiet"}}
	sentinel := pins.Defect{ID: "MO-C", Default: pins.Fixed, Specs: []string{"matrixone sentinel isolation", "AfterSuite: the sentinel is unchanged"}}
	pin := pins.Defect{ID: "MO-B", Default: pins.Live, Specs: []string{"matrixone CNClaim double binding"}}
	for _, tc := range []struct {
		name     string
		d        pins.Defect
		base     States
		flipped  []types.Report
		specs    []SpecResult
		detected bool
		others   []Change
	}{
		{"a positive assertion fails", quietFails, base, fabricated(P, F, S, S, S, P),
			[]SpecResult{{Spec: "multigres is quiet", Unflipped: "passed", Flipped: "failed", Changed: true}}, true, nil},
		{"it fails and so does another spec of its operator", quietFails, base, fabricated(T, F, S, S, S, P),
			[]SpecResult{{Spec: "multigres is quiet", Unflipped: "passed", Flipped: "failed", Changed: true}}, true,
			[]Change{{Spec: "multigres becomes Healthy", Unflipped: "passed", Flipped: "timedout"}}},
		{"nothing changes", quietFails, base, fabricated(P, P, S, S, S, P),
			[]SpecResult{{Spec: "multigres is quiet", Unflipped: "passed", Flipped: "passed"}}, false, nil},
		{"a pin appears fixed", pin, base, fabricated(S, S, P, F, S, P),
			[]SpecResult{{Spec: "matrixone CNClaim double binding", Unflipped: "passed", Flipped: "failed", Changed: true}}, true, nil},
		{"only the AfterSuite notices", sentinel, base, fabricated(S, S, P, P, S, F),
			[]SpecResult{{Spec: "matrixone sentinel isolation", Unflipped: "passed", Flipped: "passed"},
				{Spec: "AfterSuite: the sentinel is unchanged", Unflipped: "passed", Flipped: "failed", Changed: true}}, true, nil},
		{"another spec's AfterSuite failure is an other", quietFails, base, fabricated(P, F, S, S, S, F),
			[]SpecResult{{Spec: "multigres is quiet", Unflipped: "passed", Flipped: "failed", Changed: true}}, true,
			[]Change{{Spec: "[AfterSuite]", Unflipped: "passed", Flipped: "failed"}}},
		{"failing unflipped is not a flip", quietFails, states(fabricated(P, F, P, P, P, P)), fabricated(P, P, S, S, S, P),
			[]SpecResult{{Spec: "multigres is quiet", Unflipped: "failed", Flipped: "passed", Note: "failing unflipped"}}, false, nil},
		{"a failed BeforeSuite skips the spec: not run flipped", quietFails, base, []types.Report{{SpecReports: []types.SpecReport{
			suiteNode(types.NodeTypeBeforeSuite, F), it("multigres", mg, "becomes Healthy", S), it("multigres", mg, "is quiet", S)}}},
			[]SpecResult{{Spec: "multigres is quiet", Unflipped: "passed", Flipped: "skipped", Note: "not run flipped"}}, false,
			[]Change{{Spec: "[BeforeSuite]", Unflipped: "passed", Flipped: "failed"},
				{Spec: "multigres becomes Healthy", Unflipped: "passed", Flipped: "skipped"},
				{Spec: "[AfterSuite]", Unflipped: "passed", Flipped: "not run"}}},
		{"a spec the baseline did not run", quietFails, states(fabricated(P, S, P, P, P, P)), fabricated(P, F, S, S, S, P),
			[]SpecResult{{Spec: "multigres is quiet", Unflipped: "skipped", Flipped: "failed", Note: "not run unflipped"}}, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			row, err := judge(plan(tc.d, suite, operators), suite, tc.base, states(tc.flipped))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(row.Specs, tc.specs) || row.Detected != tc.detected || !reflect.DeepEqual(row.Others, tc.others) {
				t.Errorf("judge =\n  specs %+v detected %v others %+v\nwant\n  specs %+v detected %v others %+v",
					row.Specs, row.Detected, row.Others, tc.specs, tc.detected, tc.others)
			}
		})
	}
}

func TestUndetectedNamesEachEntryAndWhy(t *testing.T) {
	rows := []Row{
		{ID: "MG-A", Detected: true},
		{ID: "MG-B", Specs: []SpecResult{{Spec: "x", Unflipped: "passed", Flipped: "passed"}, {Spec: "y", Note: "failing unflipped"}}},
		unjudged(Plan{ID: "MO-C", Specs: []string{"pkg TestX"}, Missing: []string{"pkg TestX"}}, "no spec of the suite is named \"pkg TestX\""),
	}
	want := []string{`MG-B (verdict passed both ways; failing unflipped)`, `MO-C (no spec of the suite is named "pkg TestX")`}
	if got := undetected(rows); !reflect.DeepEqual(got, want) {
		t.Fatalf("undetected = %q\nwant %q", got, want)
	}
}

func TestTable(t *testing.T) {
	base := states(fabricated(P, P, P, P, P, P))
	var rows []Row
	for _, tc := range []struct {
		d       pins.Defect
		flipped []types.Report
	}{
		{pins.Defect{ID: "MG-A", Default: pins.Fixed, Specs: []string{"multigres is quiet"}}, fabricated(T, F, S, S, S, P)},
		{pins.Defect{ID: "MO-B", Default: pins.Live, Specs: []string{"matrixone CNClaim double binding"}}, fabricated(S, S, P, P, S, P)},
	} {
		row, err := judge(plan(tc.d, suite, operators), suite, base, states(tc.flipped))
		if err != nil {
			t.Fatal(err)
		}
		rows = append(rows, row)
	}
	stuck := plan(pins.Defect{ID: "MO-STUCK", Default: pins.Fixed, Specs: []string{"operators/matrixone TestX (no scenario yet)"}}, suite, operators)
	rows = append(rows, unjudged(stuck, missing(stuck)))

	var out strings.Builder
	if err := table(&out, rows); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", out.String())
	want := `ID        default  its specs                                    flipped?               other specs that flipped
MG-A      fixed    multigres is quiet                           yes: passed -> failed  multigres becomes Healthy: passed -> timedout
MO-B      live     matrixone CNClaim double binding             no: passed both ways   none
MO-STUCK  fixed    operators/matrixone TestX (no scenario yet)  no: not in the suite   (not judged)
error: MO-STUCK: no spec of the suite is named "operators/matrixone TestX (no scenario yet)": add the scenario or correct the entry's Specs in the suite's catalog (suite.Options.Pins)
`
	if out.String() != want {
		t.Errorf("table =\n%s\nwant\n%s", out.String(), want)
	}
}

func TestSelectEntries(t *testing.T) {
	got, err := selectEntries(pins.Default, []string{"MO-MIGRATION-STORM", "MG-CONDITION-MAP-ORDER"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].ID != "MG-CONDITION-MAP-ORDER" || got[1].ID != "MO-MIGRATION-STORM" {
		t.Errorf("selectEntries = %v, want the two entries in the catalog's order", got.IDs(""))
	}
	if _, err := selectEntries(pins.Default, []string{"MG-NOPE"}); err == nil || !strings.Contains(err.Error(), `"MG-NOPE", which is not in the catalog`) {
		t.Errorf("an unknown ID: err = %v", err)
	}
}

func TestNodesThatShareANameAreOneAndAFailureWins(t *testing.T) {
	cleanup := func(st types.SpecState) types.SpecReport { return suiteNode(types.NodeTypeCleanupAfterSuite, st) }
	reports := []types.Report{{SpecReports: []types.SpecReport{cleanup(P), cleanup(F), cleanup(P)}}}
	if x := index(reports); len(x) != 1 || x[0].Name != "[DeferCleanup (Suite)]" {
		t.Errorf("index = %+v, want one [DeferCleanup (Suite)]", x)
	}
	if st := states(reports)["[DeferCleanup (Suite)]"]; st != F {
		t.Errorf("state = %s, want the failed one", st)
	}
}

func TestMatrixJSONKeepsArrows(t *testing.T) {
	m := Matrix{Rows: []Row{{ID: "MG-A", Others: []Change{{Spec: "multigres a pool scaled 2 -> 3", Unflipped: "passed", Flipped: "failed"}}}}}
	if js := string(m.JSON()); !strings.Contains(js, `"Spec": "multigres a pool scaled 2 -> 3"`) {
		t.Errorf("JSON =\n%s", js)
	}
}
