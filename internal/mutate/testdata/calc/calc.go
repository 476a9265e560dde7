// Package calc is the code internal/mutate's end-to-end test mutates, judged by the fake suite in
// ../calcsuite: one mutant of each verdict and of each way a run ends.
package calc

// Limit is computed while the package initialises.
var Limit int

func init() {
	Limit = base() + 1
}

func base() int { return 10 }

// Clamp is x within [lo, hi].
func Clamp(x, lo, hi int) int {
	if x < lo {
		return lo
	}
	return min(x, hi)
}

// Sum adds 1 to n.
func Sum(n int) int {
	s := 0
	for i := 1; i <= n; i++ {
		s += i
	}
	return s
}

// First is the first of xs, 0 when there is none; it looks in a goroutine of its own.
func First(xs []int) int {
	found := make(chan int)
	go func() {
		if len(xs) > 0 {
			found <- xs[0]
			return
		}
		found <- 0
	}()
	return <-found
}

// Scale is x times 6, a constant expression.
func Scale(x int) int { return x * (2 * 3) }

// Greeting greets name.
func Greeting(name string) string { return "hi " + name }

// Unused runs in no spec.
func Unused(a int) bool { return a == 3 }
