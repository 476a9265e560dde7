package kinds

import "fmt"

// Log records each operand's evaluation, in order.
var Log []string

// at logs name and returns v.
func at(name string, v int) int {
	Log = append(Log, fmt.Sprintf("%s=%d", name, v))
	return v
}

// on logs name and returns v.
func on(name string, v bool) bool {
	Log = append(Log, fmt.Sprintf("%s=%t", name, v))
	return v
}

// ticks counts loop iterations: a mutant that makes a loop endless panics after 1000.
var ticks int

func tick() {
	if ticks++; ticks > 1000 {
		panic("endless loop")
	}
}
