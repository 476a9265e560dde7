package suite

import (
	"fmt"
	"os"

	"github.com/ensembletest/ensemble/pins"
)

// listPins answers `ensemble defect-matrix`'s question about the suite's catalog: with pins.ListEnvVar set,
// Boot writes a pins.Listing of catalog to the file it names and boots nothing, and the returned error ends
// the run (the command reads the file, not the run's verdict). ok is false when the variable is not set.
func listPins(catalog PinCatalog) (ok bool, err error) {
	path := os.Getenv(pins.ListEnvVar)
	if path == "" {
		return false, nil
	}
	if err := pins.WriteListing(path, catalog); err != nil {
		return true, fmt.Errorf("suite: %s=%s: cannot write the pin catalog: %w", pins.ListEnvVar, path, err)
	}
	return true, fmt.Errorf("suite: %s is set: the pin catalog is written to %s and nothing is booted (a run that only lists the catalog, as ensemble defect-matrix asks)", pins.ListEnvVar, path)
}
