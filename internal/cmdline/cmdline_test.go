package cmdline

import (
	"errors"
	"flag"
	"strings"
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

func TestParsedForASubcommand(t *testing.T) {
	newFS := func() (*flag.FlagSet, *int) {
		fs := flag.NewFlagSet("flake", flag.ContinueOnError)
		n := fs.Int("n", 0, "runs")
		Usage(fs, "ensemble flake -n RUNS", "Runs the suite.")
		return fs, n
	}
	positive := func(n *int) func() error {
		return func() error {
			if *n < 1 {
				return errors.New("pass -n")
			}
			return nil
		}
	}
	for _, tc := range []struct {
		args   []string
		code   int
		ok     bool
		stderr string
	}{
		{[]string{"-n", "2"}, 0, true, ""},
		{[]string{"-h"}, 0, false, "usage: ensemble flake -n RUNS\n\nRuns the suite.\n\nflags:\n  -n int\n"},
		{[]string{"-n", "0"}, 7, false, "flake: pass -n\n"},
		{[]string{"-n", "2", "x"}, 7, false, "flake: unexpected argument \"x\": every input is a flag (-h lists them)\n"},
		{[]string{"-m"}, 7, false, "flake: flag provided but not defined: -m (-h lists the flags)\n"},
	} {
		fs, n := newFS()
		var stderr strings.Builder
		code, ok := Parsed(fs, tc.args, nil, &stderr, 7, positive(n))
		if code != tc.code || ok != tc.ok || !strings.HasPrefix(stderr.String(), tc.stderr) {
			t.Errorf("Parsed(%q) = %d, %v, stderr %q; want %d, %v, %q", tc.args, code, ok, stderr.String(), tc.code, tc.ok, tc.stderr)
		}
	}
}
