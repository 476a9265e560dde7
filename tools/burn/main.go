// Command burn keeps the machine's CPUs busy, so that the harness's self-tests can be run on a loaded
// machine, as a busy CI runner is:
//
//	go run ./tools/burn & make test
//	go run ./tools/burn -d 10m &
//
// It spins -n threads (default: the number of CPUs; more make a load average above the CPU count, as
// `make test`'s parallel packages do, e.g. -n 16 on two cores) until it is killed, until -d has passed (default 0:
// no bound) or until its parent exits (a `go run` killed with SIGTERM does not stop its child, so burn
// watches for that itself). It prints one line when it stops: the threads, the time and the spins.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	n := flag.Int("n", runtime.NumCPU(), "threads to spin, each one runnable thread on the machine's run queue")
	d := flag.Duration("d", 0, "stop after this long (0: until killed)")
	flag.Parse()
	if *n < 1 || *d < 0 {
		fmt.Fprintf(os.Stderr, "burn: -n %d -d %s: give at least one goroutine and a duration of 0 (no bound) or more\n", *n, *d)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *d)
		defer cancel()
	}
	ctx = untilOrphaned(ctx, os.Getppid(), time.Second)
	start := time.Now()
	spins := burn(ctx, *n)
	fmt.Fprintf(os.Stderr, "burn: %d threads for %s, %d spins\n", *n, time.Since(start).Round(time.Millisecond), spins)
}

// burn spins n goroutines, each on its own OS thread (GOMAXPROCS is raised to n, so all n run at once and
// the kernel sees n runnable threads), until ctx is done and returns how many spins of 1<<16 iterations they
// made in all; each makes at least one, so the result is at least n.
func burn(ctx context.Context, n int) uint64 {
	if n > runtime.GOMAXPROCS(0) {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(n))
	}
	var total atomic.Uint64
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			x := uint64(1)
			for {
				for range 1 << 16 {
					x = x*6364136223846793005 + 1442695040888963407
				}
				total.Add(1)
				if ctx.Err() != nil {
					sink.Store(x)
					return
				}
			}
		}()
	}
	wg.Wait()
	return total.Load()
}

// sink keeps the spinning loop's result alive, so the compiler cannot drop the loop.
var sink atomic.Uint64

// untilOrphaned returns a context cancelled with ctx or once the process's parent is no longer parent,
// checked every interval.
func untilOrphaned(ctx context.Context, parent int, interval time.Duration) context.Context {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		defer cancel()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if os.Getppid() != parent {
					return
				}
			}
		}
	}()
	return ctx
}
