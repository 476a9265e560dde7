package main

import (
	"context"
	"os"
	"testing"
	"time"
)

// TestBurn checks that burn returns once its context is done and that every goroutine spun.
func TestBurn(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if got := burn(ctx, 3); got < 3 {
		t.Fatalf("burn(3) made %d spins, want at least one per goroutine", got)
	}
}

// TestUntilOrphaned checks that the context ends once the recorded parent is not the process's parent (a
// test that fails hangs until go test's timeout).
func TestUntilOrphaned(t *testing.T) {
	ctx := untilOrphaned(context.Background(), os.Getppid()+1, time.Millisecond)
	<-ctx.Done()
}
