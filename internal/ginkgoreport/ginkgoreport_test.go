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
