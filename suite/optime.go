package suite

import "time"

// OperatorTimeline undoes requeue compression for the passes of one controller key (oldest first): it
// returns each pass's start in the operator's own time, measured from the first pass. A gap that lasted at
// least the compressed delay the previous pass was handed counts as the delay that pass asked for (the
// requeue woke the controller); a shorter gap, or one after a pass that asked for no delayed requeue,
// counts as the wall time it took (an event woke it first). Rates "in the operator's own time" count passes
// on this timeline; divide by a fixture's time scale to get the real operator's seconds.
func OperatorTimeline(passes []Pass) []time.Duration {
	out := make([]time.Duration, len(passes))
	for i := 1; i < len(passes); i++ {
		prev, cur := passes[i-1], passes[i]
		gap := cur.Start.Sub(prev.Start)
		if woke(prev, cur.Start) {
			gap = prev.Asked
		}
		out[i] = out[i-1] + gap
	}
	return out
}

// PassesWithin counts the passes whose OperatorTimeline offset is below window (the first pass counts).
func PassesWithin(passes []Pass, window time.Duration) int {
	n := 0
	for _, t := range OperatorTimeline(passes) {
		if t < window {
			n++
		}
	}
	return n
}
