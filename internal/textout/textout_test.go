package textout

import "testing"

func TestCount(t *testing.T) {
	for n, want := range map[int]string{0: "0 specs", 1: "1 spec", 2: "2 specs"} {
		if got := Count(n, "spec", "specs"); got != want {
			t.Errorf("Count(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestCut(t *testing.T) {
	for _, tc := range []struct {
		s    string
		n    int
		want string
	}{{"abcdef", 6, "abcdef"}, {"abcdefg", 6, "abc..."}, {"äöüäöüä", 6, "äöü..."}} {
		if got := Cut(tc.s, tc.n); got != tc.want {
			t.Errorf("Cut(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
	}
}

func TestJSONLeavesArrowsAlone(t *testing.T) {
	b, err := JSON(map[string]string{"spec": "scaled 2 -> 3 & <back>"})
	if err != nil || string(b) != "{\n  \"spec\": \"scaled 2 -> 3 & <back>\"\n}\n" {
		t.Errorf("JSON = %q, %v", b, err)
	}
	if _, err := JSON(func() {}); err == nil {
		t.Error("JSON of a function: no error")
	}
}
