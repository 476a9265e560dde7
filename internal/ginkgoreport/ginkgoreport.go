// Package ginkgoreport reads Ginkgo JSON reports (-ginkgo.json-report=FILE), names their nodes and prints
// their failures and run times, for the commands that run a suite and judge its runs (internal/defectmatrix,
// internal/explore, internal/mutate, internal/flake, internal/bisect), and runs a compiled suite to get one
// (RunSuite).
package ginkgoreport

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/onsi/ginkgo/v2/types"
)

// Read parses the Ginkgo JSON report at path: an array of suite reports. Errors: the file cannot be read, or
// it is not such an array.
func Read(path string) ([]types.Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var reports []types.Report
	if err := json.Unmarshal(b, &reports); err != nil {
		return nil, fmt.Errorf("%s is not a Ginkgo JSON report: %w", path, err)
	}
	return reports, nil
}

// Ran is the It specs of reports that ran (neither skipped nor pending), in the reports' order. In a dry
// run's report, they are the specs the run's filters select.
func Ran(reports []types.Report) []types.SpecReport {
	var out []types.SpecReport
	for _, r := range reports {
		for _, sr := range r.SpecReports {
			if sr.LeafNodeType == types.NodeTypeIt && !sr.State.Is(types.SpecStateSkipped|types.SpecStatePending) {
				out = append(out, sr)
			}
		}
	}
	return out
}

// Name is a spec's full text (its containers' texts and its own, joined by spaces), or its node type in
// brackets for a suite node ("[BeforeSuite]", "[AfterSuite]").
func Name(sr types.SpecReport) string {
	if sr.LeafNodeType != types.NodeTypeIt {
		return "[" + sr.LeafNodeType.String() + "]"
	}
	return sr.FullText()
}

// It is the report of the It spec named name (its full text) in reports; ok is false when none is there.
func It(reports []types.Report, name string) (sr types.SpecReport, ok bool) {
	for _, rep := range reports {
		for _, sr := range rep.SpecReports {
			if sr.LeafNodeType == types.NodeTypeIt && Name(sr) == name {
				return sr, true
			}
		}
	}
	return types.SpecReport{}, false
}
