package ginkgoreport

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/onsi/ginkgo/v2/types"
)

func TestReadRefusesWhatIsNotAReport(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x.json")
	if err := os.WriteFile(p, []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(p); err == nil || !strings.Contains(err.Error(), "not a Ginkgo JSON report") {
		t.Fatalf("err = %v", err)
	}
}

func TestNameOfASpecAndOfASuiteNode(t *testing.T) {
	it := types.SpecReport{LeafNodeType: types.NodeTypeIt, ContainerHierarchyTexts: []string{"matrixone", "CNClaim"}, LeafNodeText: "binds"}
	if n := Name(it); n != "matrixone CNClaim binds" {
		t.Errorf("Name(It) = %q", n)
	}
	if n := Name(types.SpecReport{LeafNodeType: types.NodeTypeAfterSuite}); n != "[AfterSuite]" {
		t.Errorf("Name(AfterSuite) = %q", n)
	}
}

func TestRanLeavesOutSkippedPendingAndSuiteNodes(t *testing.T) {
	it := func(text string, state types.SpecState) types.SpecReport {
		return types.SpecReport{LeafNodeType: types.NodeTypeIt, LeafNodeText: text, State: state}
	}
	reports := []types.Report{
		{SpecReports: types.SpecReports{{LeafNodeType: types.NodeTypeBeforeSuite, State: types.SpecStatePassed},
			it("a", types.SpecStatePassed), it("b", types.SpecStateSkipped), it("c", types.SpecStateFailed)}},
		{SpecReports: types.SpecReports{it("d", types.SpecStatePending), it("e", types.SpecStateInterrupted)}},
	}
	var got []string
	for _, sr := range Ran(reports) {
		got = append(got, sr.LeafNodeText)
	}
	if strings.Join(got, " ") != "a c e" {
		t.Errorf("Ran = %q, want a c e", got)
	}
}
