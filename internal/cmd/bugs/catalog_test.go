package main

import "testing"

// The repository's catalog reads: every entry names its example's versions as directories there are.
func TestTheCatalogReads(t *testing.T) {
	entries, err := readCatalog("../../../examples/bugs.yaml", "../../../examples")
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) < 2 {
		t.Errorf("examples/bugs.yaml lists %d entries", len(entries))
	}
}
