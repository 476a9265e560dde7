// Package doccheck holds tests that keep the written word true to the tree. It has no code of its own.
package doccheck

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// root is the module root: the test runs in internal/doccheck.
const root = "../.."

// layoutDoc is the document whose §1 code block lists the layout.
const layoutDoc = "docs/architecture.md"

// Every directory holding .go files is in docs/architecture.md §1's layout block. The rule: a directory is
// covered when a line of the block starts with its path and a slash ("suite/perturb/"), or when a line
// starting with an ancestor's path names the rest of its path with a trailing slash in its description
// ("operators/multigres/" naming "api/v1alpha1/" and "topo/"). Directories Go ignores (testdata, names
// starting with "." or "_") and bin/, the Makefile's tool directory, are left out.
func TestLayoutNamesEveryGoDirectory(t *testing.T) {
	entries := layoutEntries(t)
	var missing []string
	for _, dir := range goDirs(t) {
		if !covered(dir, entries) {
			missing = append(missing, dir+"/")
		}
	}
	if len(missing) > 0 {
		t.Errorf("%s §1's layout block does not name these directories holding Go files (add a line each, "+
			"or name the rest of the path in an ancestor's line):\n  %s", layoutDoc, strings.Join(missing, "\n  "))
	}
}

// Every directory a line of the layout block starts with exists.
func TestLayoutNamesOnlyDirectoriesThatExist(t *testing.T) {
	for dir := range layoutEntries(t) {
		if fi, err := os.Stat(filepath.Join(root, dir)); err != nil || !fi.IsDir() {
			t.Errorf("%s §1's layout block names %s/, which is no directory", layoutDoc, dir)
		}
	}
}

// layoutEntries reads §1's first code block: each line that starts with a directory path ("suite/perturb/"),
// by that path without its slash, to the rest of the line.
func layoutEntries(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, layoutDoc))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i := strings.Index(doc, "\n## 1. Layout\n")
	if i < 0 {
		t.Fatalf("%s has no \"## 1. Layout\" section", layoutDoc)
	}
	sec := doc[i+1:]
	if j := strings.Index(sec, "\n## "); j >= 0 {
		sec = sec[:j]
	}
	_, block, ok := strings.Cut(sec, "```\n")
	if ok {
		block, _, ok = strings.Cut(block, "```")
	}
	if !ok {
		t.Fatalf("%s §1 has no code block", layoutDoc)
	}
	entries := map[string]string{}
	for _, line := range strings.Split(block, "\n") {
		first, rest, _ := strings.Cut(line, " ")
		if strings.HasSuffix(first, "/") && !strings.ContainsAny(first, ",`") {
			entries[strings.TrimSuffix(first, "/")] = rest
		}
	}
	if len(entries) == 0 {
		t.Fatalf("%s §1's code block names no directory", layoutDoc)
	}
	return entries
}

// goDirs lists the directories under root that hold .go files, slash-separated and relative to root, sorted.
func goDirs(t *testing.T) []string {
	t.Helper()
	var dirs []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			name := d.Name()
			if rel != "." && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || rel == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if dir := filepath.ToSlash(filepath.Dir(rel)); strings.HasSuffix(rel, ".go") && dir != "." && !slices.Contains(dirs, dir) {
			dirs = append(dirs, dir)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) == 0 || !slices.Contains(dirs, "internal/doccheck") {
		t.Fatalf("%s is not the module root: internal/doccheck is not among its Go directories %v", root, dirs)
	}
	slices.Sort(dirs)
	return dirs
}

// covered reports whether dir is named in entries by the rule of TestLayoutNamesEveryGoDirectory.
func covered(dir string, entries map[string]string) bool {
	if _, ok := entries[dir]; ok {
		return true
	}
	for parent, desc := range entries {
		rest, ok := strings.CutPrefix(dir, parent+"/")
		if !ok {
			continue
		}
		for _, f := range strings.Fields(desc) {
			if strings.Trim(f, ",;:()`") == rest+"/" {
				return true
			}
		}
	}
	return false
}
