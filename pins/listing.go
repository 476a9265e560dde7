package pins

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
)

// ListEnvVar names the file a suite's test binary writes its defect catalog to, instead of booting: when it
// is set, suite.Boot writes a Listing of its Options.Pins there and returns an error that ends the run.
// `ensemble defect-matrix` sets it to learn the catalog of a suite in any module from the suite itself.
const ListEnvVar = "ENSEMBLE_LIST_PINS"

// Listing is what WriteListing writes: the Go type of a suite's Options.Pins and, when it is a Catalog,
// its entries (none for a catalog of another type, which can only look references up).
type Listing struct {
	// Type is the catalog's Go type as %T prints it ("pins.Catalog", "<nil>" for none).
	Type string
	// Entries are the catalog's entries, in its order; empty unless the catalog is a Catalog.
	Entries Catalog
}

// WriteListing writes catalog's Listing to path as JSON. Errors: os.WriteFile's.
func WriteListing(path string, catalog any) error {
	l := Listing{Type: fmt.Sprintf("%T", catalog)}
	if c, ok := catalog.(Catalog); ok {
		l.Entries = c
	}
	b, err := json.MarshalIndent(l, "", "  ")
	if err != nil {
		return err // a Listing holds only strings, bools and slices of them
	}
	return os.WriteFile(path, b, 0o644)
}

// ReadListing reads a Listing WriteListing wrote to path. Errors: the file cannot be read, or it holds no
// Listing.
func ReadListing(path string) (Listing, error) {
	var l Listing
	b, err := os.ReadFile(path)
	if err != nil {
		return l, err
	}
	if err := json.Unmarshal(b, &l); err != nil || l.Type == "" {
		return l, errors.Join(fmt.Errorf("%s holds no pin catalog listing", path), err)
	}
	return l, nil
}
