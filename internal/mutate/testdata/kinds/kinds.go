// Package kinds holds one position of each kind the mutant schema rewrites, for internal/mutate's tests:
// each schema mutant must behave as the same mutant compiled alone. Operands are calls that log, so that
// a switch that evaluates an operand twice, or out of order, shows.
package kinds

import (
	"errors"
	"time"
)

// Scale is computed while the package initialises.
var Scale = at("scale", 3) + 1

// Twice is a constant expression.
const Twice = 2 * 3

// Ordered compares ints, floats and strings.
func Ordered(a, b int, f float64, s string) []bool {
	return []bool{at("a", a) < at("b", b), at("a", a) >= b, f > 0.5, s <= "m", a != b}
}

// Equal compares an error with nil, a pointer, an interface with a concrete value and a slice with nil.
func Equal(err error, p *int, v any, xs []int) []bool {
	return []bool{err == nil, p != nil, v == 3, xs == nil, errors.Is(err, errBad) == true}
}

var errBad = errors.New("bad")

// Arith adds, subtracts, multiplies, divides and takes remainders of ints, floats and durations.
func Arith(a, b int, f float64, d time.Duration) []float64 {
	return []float64{float64(at("a", a) + at("b", b)), float64(a - b*at("c", 2)), f / 2, float64(d * time.Second), float64(a % 3), float64(Twice + a)}
}

// Neg negates.
func Neg(a int, f float64) []float64 {
	return []float64{float64(-at("a", a)), -f}
}

// Counts counts up and down, in a for clause and in statements, with assignment operators.
func Counts(n int) []int {
	up, down, sum := 0, n, 0
	for i := 0; i < n; i++ {
		tick()
		up++
		down--
		sum += i
	}
	return []int{up, down, sum}
}

// Branch breaks and continues.
func Branch(n int) []int {
	var out []int
	for i := 0; i < n; i++ {
		tick()
		if i == 1 {
			continue
		}
		if i == 3 {
			break
		}
		out = append(out, i)
	}
	return out
}

// Logic ands and ors.
func Logic(a, b bool) []bool {
	return []bool{on("a", a) && on("b", b), on("a", a) || on("b", b)}
}

// Shift shifts.
func Shift(a uint) uint {
	return 1 << a
}

// Recovered compares what recover returns with a string: a closure around the comparison would
// recover nothing.
func Recovered() (ok bool) {
	defer func() {
		ok = recover() != "q"
	}()
	panic("p")
}

// Greeting joins strings.
func Greeting(name string) string {
	return "hi " + name
}
