package suite

import (
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
)

// watchLedger keeps the watch requests of the managers' HTTP clients that are open. kube-apiserver does not
// stop while a watch is open on it, and envtest's timeout then names no cause: a manager's watch that
// outlives the manager (one an operator started on context.Background() rather than on Register's ctx) is
// such a cause, and the ledger lets Suite.Stop name it (docs/architecture.md §3 Boot and managers). The zero
// value is ready to use.
type watchLedger struct {
	mu   sync.Mutex
	next int
	open map[int]*openWatch
}

// openWatch is one watch request: the manager whose rest config made it, its User-Agent, the request
// ("GET /api/v1/configmaps?watch=true"), and how it ended. closedByClient is set when its reader closed it
// (a manager or an operator ending the watch), serverEnded when the API server ended it first (its body
// failed to read before any close); both are guarded by the ledger's mu.
type openWatch struct {
	manager, userAgent, request string
	closedByClient, serverEnded bool
}

// wrap returns the transport wrapper of manager's rest config (rest.Config.Wrap), which notes each watch
// request from when it is sent until its response body is closed or it fails.
func (l *watchLedger) wrap(manager, userAgent string) func(http.RoundTripper) http.RoundTripper {
	return func(next http.RoundTripper) http.RoundTripper {
		return &ledgerTransport{l: l, next: next, manager: manager, userAgent: userAgent}
	}
}

// add notes an open watch and returns its key for closed.
func (l *watchLedger) add(w *openWatch) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open == nil {
		l.open = map[int]*openWatch{}
	}
	l.next++
	l.open[l.next] = w
	return l.next
}

// closed notes that the watch of key id is closed: by its reader, unless the API server ended it first.
func (l *watchLedger) closed(id int) {
	l.mu.Lock()
	if w := l.open[id]; w != nil && !w.serverEnded {
		w.closedByClient = true
	}
	delete(l.open, id)
	l.mu.Unlock()
}

// readFailed notes that the body of watch id failed to read before any close: the API server ended it.
func (l *watchLedger) readFailed(id int) {
	l.mu.Lock()
	if w := l.open[id]; w != nil && !w.closedByClient {
		w.serverEnded = true
	}
	l.mu.Unlock()
}

// snapshot returns the watches open now; heldOpen later tells which of them no client closed.
func (l *watchLedger) snapshot() []*openWatch {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]*openWatch, 0, len(l.open))
	for _, w := range l.open {
		out = append(out, w)
	}
	return out
}

// heldOpen renders the watches of ws that no client has closed (still open, or ended by the API server, as
// a control plane killed after its stop timed out ends them), by manager, e.g. `manager leaky (User-Agent
// ensemble-leaky/v0) holds 1 watch: GET /api/v1/secrets?watch=true`, managers sorted and separated by "; ";
// "" when there is none.
func (l *watchLedger) heldOpen(ws []*openWatch) string {
	l.mu.Lock()
	byManager := map[[2]string][]string{}
	for _, w := range ws {
		if !w.closedByClient {
			k := [2]string{w.manager, w.userAgent}
			byManager[k] = append(byManager[k], w.request)
		}
	}
	l.mu.Unlock()
	var out []string
	for k, reqs := range byManager {
		sort.Strings(reqs)
		noun := "watches"
		if len(reqs) == 1 {
			noun = "watch"
		}
		out = append(out, fmt.Sprintf("manager %s (User-Agent %s) holds %d %s: %s", k[0], k[1], len(reqs), noun, strings.Join(reqs, ", ")))
	}
	sort.Strings(out)
	return strings.Join(out, "; ")
}

// ledgerTransport is a manager's transport with its watch requests noted in the ledger.
type ledgerTransport struct {
	l                  *watchLedger
	next               http.RoundTripper
	manager, userAgent string
}

func (t *ledgerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !isWatch(req) {
		return t.next.RoundTrip(req)
	}
	id := t.l.add(&openWatch{manager: t.manager, userAgent: t.userAgent, request: req.Method + " " + req.URL.RequestURI()})
	resp, err := t.next.RoundTrip(req)
	if err != nil || resp == nil || resp.Body == nil {
		t.l.closed(id)
		return resp, err
	}
	resp.Body = &ledgerBody{ReadCloser: resp.Body, l: t.l, id: id}
	return resp, nil
}

// ledgerBody is a watch response's body that tells the ledger how the watch ends.
type ledgerBody struct {
	io.ReadCloser
	l  *watchLedger
	id int
}

func (b *ledgerBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		// A read failing after the reader's own Close changes nothing (closed came first).
		b.l.readFailed(b.id)
	}
	return n, err
}

func (b *ledgerBody) Close() error {
	b.l.closed(b.id)
	return b.ReadCloser.Close()
}

// isWatch reports whether req opens a watch: a GET with watch=true (or 1), or on the legacy /watch/ paths.
func isWatch(req *http.Request) bool {
	if req.Method != http.MethodGet {
		return false
	}
	switch req.URL.Query().Get("watch") {
	case "true", "1":
		return true
	}
	return strings.Contains(req.URL.Path, "/watch/")
}
