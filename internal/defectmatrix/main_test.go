package defectmatrix

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ensembletest/ensemble/pins"
)

// Bad input is one line on stderr and exit 2, before anything is compiled; -h is the usage and exit 0.
func TestMainRefusesBadInputInOneLine(t *testing.T) {
	t.Setenv(pins.EnvVar, "")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-nope"}, "defect-matrix: flag provided but not defined: -nope (-h lists the flags)"},
		{[]string{"-timeout", "0s"}, "defect-matrix: -timeout (make's SUITE_TIMEOUT) is 0s: pass each run's limit, such as 20m"},
		{[]string{"-timeout", "soon"}, `defect-matrix: -timeout (make's SUITE_TIMEOUT): invalid value "soon": pass a duration such as 20m`},
		{[]string{"MG-X"}, `defect-matrix: unexpected argument "MG-X": every input is a flag (-h lists them)`},
		{[]string{"-suite", t.TempDir()}, "has no _test.go file: name the Ginkgo suite's package directory"},
	} {
		var out, errb bytes.Buffer
		code := Main(context.Background(), tc.args, &out, &errb)
		lines := strings.Split(strings.TrimSpace(errb.String()), "\n")
		if code != 2 || len(lines) != 1 || !strings.Contains(lines[0], tc.want) || out.Len() > 0 {
			t.Errorf("%q: exit %d, stderr %q, stdout %q; want exit 2 and one line containing %q", tc.args, code, errb.String(), out.String(), tc.want)
		}
	}
	var out, errb bytes.Buffer
	if code := Main(context.Background(), []string{"-h"}, &out, &errb); code != 0 || !strings.HasPrefix(errb.String(), "usage: "+Synopsis) ||
		!strings.Contains(errb.String(), "-operators") {
		t.Errorf("-h: exit %d, stderr %q", code, errb.String())
	}
}

// The catalog comes from the suite: its binary writes the listing where pins.ListEnvVar says, and a run
// that never reached suite.Boot is said with the end of its output.
func TestCatalogAsksTheSuite(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "suite.test")
	listing := `{"Type": "pins.Catalog", "Entries": [{"ID": "X-A", "Default": "live", "Specs": ["x a"]}]}`
	script := "#!/bin/sh\n[ -n \"$" + pins.ListEnvVar + "\" ] && echo '" + listing + "' >\"$" + pins.ListEnvVar + "\"\necho BeforeSuite failed\nexit 1\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	r := runner{bin: bin, suite: dir, ctx: context.Background()}
	l, err := r.catalog()
	if err != nil || len(l.Entries) != 1 || l.Entries[0].ID != "X-A" || l.Entries[0].Default != pins.Live {
		t.Fatalf("catalog = %+v, %v", l, err)
	}
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho not an ensemble suite\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "pins.json")); err != nil {
		t.Fatal(err)
	}
	if _, err := r.catalog(); err == nil || !strings.Contains(err.Error(), "never reached suite.Boot") || !strings.Contains(err.Error(), "not an ensemble suite") {
		t.Errorf("catalog of a suite that lists nothing: %v", err)
	}
}
