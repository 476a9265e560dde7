package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestRunSaysWhatToDoInOneLine(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "ensemble: name a command: explore, mutate, flake, bisect, defect-matrix (ensemble -h describes them)"},
		{[]string{"flakes"}, `ensemble: unknown command "flakes": use one of explore, mutate, flake, bisect, defect-matrix (ensemble -h describes them)`},
		{[]string{"-n", "3"}, `ensemble: unknown command "-n": use one of `},
		{[]string{"flake"}, "flake: pass -n (make's N) <runs>"},
		{[]string{"bisect", "-focus", "x"}, "bisect: pass -good (make's GOOD) <rev>"},
		{[]string{"defect-matrix", "-nope"}, "defect-matrix: flag provided but not defined: -nope (-h lists the flags)"},
		{[]string{"mutate", "-j", "0", "-pkg", "x"}, "mutate: -j (make's MUTATE_JOBS) is 0"},
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), tc.args, &out, &errb)
		lines := strings.Split(strings.TrimSpace(errb.String()), "\n")
		if code == 0 || len(lines) != 1 || !strings.HasPrefix(lines[0], tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want one line starting %q", tc.args, code, errb.String(), tc.want)
		}
	}
}

func TestHelpListsEveryCommandAndEachGivesItsFlags(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"-h"}, &out, &errb); code != 0 {
		t.Fatalf("ensemble -h: exit %d", code)
	}
	for _, c := range commands {
		if !strings.Contains(errb.String(), "  "+c.name+"  ") || !strings.Contains(errb.String(), c.about) {
			t.Errorf("ensemble -h does not list %s:\n%s", c.name, errb.String())
		}
	}
	for _, c := range commands {
		errb.Reset()
		if code := run(context.Background(), []string{c.name, "-h"}, &out, &errb); code != 0 ||
			!strings.HasPrefix(errb.String(), "usage: ensemble "+c.name) || !strings.Contains(errb.String(), "flags:\n  -") {
			t.Errorf("ensemble %s -h: exit %d:\n%s", c.name, code, errb.String())
		}
	}
}
