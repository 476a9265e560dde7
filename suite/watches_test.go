package suite

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
)

// pipeTripper answers every request with the read end of a new pipe, whose write end the test keeps, as
// the API server keeps a watch's stream.
type pipeTripper struct{ servers []*io.PipeWriter }

func (p *pipeTripper) RoundTrip(*http.Request) (*http.Response, error) {
	r, w := io.Pipe()
	p.servers = append(p.servers, w)
	return &http.Response{StatusCode: http.StatusOK, Body: r}, nil
}

// TestWatchLedgerNamesTheWatchesNoClientClosed: of the watches open when the control plane's stop begins, a
// watch its reader closes is not named, while one still open and one the API server ended (as a control
// plane killed after its stop timed out ends them) are; requests that are not watches are not noted.
func TestWatchLedgerNamesTheWatchesNoClientClosed(t *testing.T) {
	var l watchLedger
	server := &pipeTripper{}
	c := &http.Client{Transport: l.wrap("op", "ensemble-op/v0")(server)}
	get := func(url string) *http.Response {
		resp, err := c.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	closed := get("http://api/api/v1/configmaps?watch=true")
	open := get("http://api/api/v1/secrets?watch=true")
	ended := get("http://api/apis/apps/v1/watch/deployments")
	get("http://api/api/v1/pods")
	at := l.snapshot()
	if len(at) != 3 {
		t.Fatalf("%d watches noted, want 3 (a list is no watch)", len(at))
	}
	_ = closed.Body.Close()
	server.servers[2].CloseWithError(errors.New("connection reset"))
	if _, err := io.ReadAll(ended.Body); err == nil {
		t.Fatal("the ended watch read no error")
	}
	_ = ended.Body.Close()
	got := l.heldOpen(at)
	want := "manager op (User-Agent ensemble-op/v0) holds 2 watches: GET /api/v1/secrets?watch=true, GET /apis/apps/v1/watch/deployments"
	if got != want {
		t.Fatalf("heldOpen = %q, want %q", got, want)
	}
	_ = open.Body.Close()
	if got := l.heldOpen(at); !strings.Contains(got, "holds 1 watch: GET /apis/apps/v1/watch/deployments") {
		t.Fatalf("after its reader closed the open watch: %q, want only the one the server ended", got)
	}
}
