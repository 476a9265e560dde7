package suite

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ensembletest/ensemble/pins"
)

// With pins.ListEnvVar set, Boot lists the catalog and boots nothing, whatever else the options hold (no
// Scheme here, which Boot would otherwise refuse).
func TestBootListsThePinCatalogAndBootsNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pins.json")
	t.Setenv(pins.ListEnvVar, path)
	catalog := pins.Catalog{{ID: "X-ONE", Default: pins.Live, Specs: []string{"x one"}}}
	s, err := Boot(context.Background(), Options{Pins: catalog})
	if s != nil || err == nil || !strings.Contains(err.Error(), "the pin catalog is written to "+path+" and nothing is booted") {
		t.Fatalf("Boot = %v, %v", s, err)
	}
	l, err := pins.ReadListing(path)
	if err != nil || l.Type != "pins.Catalog" || len(l.Entries) != 1 || l.Entries[0].ID != "X-ONE" || l.Entries[0].Specs[0] != "x one" {
		t.Errorf("listing = %+v, %v", l, err)
	}
	// A catalog that can only look references up lists its type and no entry.
	if _, err := Boot(context.Background(), Options{}); err == nil {
		t.Fatal("Boot without a catalog booted")
	}
	if l, err := pins.ReadListing(path); err != nil || l.Type != "<nil>" || len(l.Entries) != 0 {
		t.Errorf("listing without a catalog = %+v, %v", l, err)
	}
}
