package suite

import "time"

// OperatorTimeline undoes requeue compression for the passes of one controller key (oldest first): it
// returns each pass's start in the operator's own time, measured from the first pass. The gap before a pass
// its predecessor's delayed requeue woke (Pass.Requeued) counts as the delay that predecessor asked for; the
// gap before any other pass (an event woke it, Pass.Event, or it retries an error) counts as the wall time it
// took. Both flags are read from the controller's queue, so a loaded machine stretches the timeline's event
// gaps, never mistakes one wake for the other. Divide by a fixture's time scale to get the real operator's
// seconds.
func OperatorTimeline(passes []Pass) []time.Duration {
	out := make([]time.Duration, len(passes))
	for i := 1; i < len(passes); i++ {
		prev, cur := passes[i-1], passes[i]
		gap := cur.Start.Sub(prev.Start)
		if cur.Requeued {
			gap = prev.Asked
		}
		out[i] = out[i-1] + gap
	}
	return out
}

// Wakes counts what woke the passes of one controller key, as CountWakes reads them. A pass that retries an
// error (controller-runtime's rate-limited retry) is in neither count.
type Wakes struct {
	// Events counts the passes an event woke (Pass.Event), the key's first pass aside.
	Events int
	// Requeues counts the passes their predecessor's delayed requeue woke (Pass.Requeued).
	Requeues int
	// RequeueTime sums the delays those predecessors asked for: the operator's own time the requeue-woken
	// passes waited, before compression and a fixture's time scale.
	RequeueTime time.Duration
}

// CountWakes reads, over one controller key's passes (oldest first, as Case.Passes returns them for one
// request and controller), what woke each pass after the first. A storm of passes that wake themselves
// (each pass's own write queues the next) is many Events within little RequeueTime; a loaded machine makes
// such a storm slower, not smaller.
func CountWakes(passes []Pass) Wakes {
	var w Wakes
	for i := 1; i < len(passes); i++ {
		switch {
		case passes[i].Event:
			w.Events++
		case passes[i].Requeued:
			w.Requeues++
			w.RequeueTime += passes[i-1].Asked
		}
	}
	return w
}
