// Package textout holds the text helpers of the commands that print the results of suite runs
// (internal/defectmatrix, internal/explore, internal/flake, internal/bisect): a count with its noun, a
// table cell cut to a width, a result as indented JSON.
package textout

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Count prints n with the singular or the plural noun: "1 spec", "3 specs".
func Count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// Cut shortens s to n characters (n > 3), the last three "..." when it is longer.
func Cut(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-3]) + "..."
	}
	return s
}

// JSON renders v indented by two spaces, with '<', '>' and '&' left as they are (spec names hold "->").
// Errors: json.Marshal's (a channel, a function, a cycle).
func JSON(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
