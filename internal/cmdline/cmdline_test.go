package cmdline

import (
	"flag"
	"testing"
)

func TestParseSaysWhichFlagAndWhatItTakes(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-max", "abc"}, `-max (make's MAX): invalid value "abc": pass a whole number (how many mutants, 0 for all)`},
		{[]string{"-t", "soon"}, `-t: invalid value "soon": pass a duration such as 20m (a limit)`},
		{[]string{"-nope"}, `flag provided but not defined: -nope (-h lists the flags)`},
	} {
		fs := flag.NewFlagSet("x", flag.ExitOnError)
		fs.Int("max", 0, "how many mutants, 0 for all")
		fs.Duration("t", 0, "a limit")
		err := Parse(fs, tc.args, map[string]string{"max": "MAX"})
		if err == nil || err.Error() != tc.want {
			t.Errorf("Parse(%q) = %v, want %s", tc.args, err, tc.want)
		}
	}
	fs := flag.NewFlagSet("x", flag.ExitOnError)
	n := fs.Int("max", 0, "")
	if err := Parse(fs, []string{"-max", "3"}, nil); err != nil || *n != 3 {
		t.Errorf("Parse(-max 3) = %v, max %d", err, *n)
	}
}
