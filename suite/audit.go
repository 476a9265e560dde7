package suite

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ensembletest/ensemble/internal/controlplane"
)

// auditIDPrefix starts the Audit-ID request header of every request a client the harness records itself
// sends (each manager's, each Case's, the harness's own administrator client). kube-apiserver takes a
// client's Audit-ID as the audit event's auditID, and the audit reader skips those events: the harness
// recorded those writes already, or chose not to.
const auditIDPrefix = "ensemble-"

// auditPoll is how often the audit reader looks for new lines in kube-apiserver's audit log. Queries that
// read writes (Case.Writes, FieldWriters, quiescence, dumps) read the log to its end first, so it only
// bounds how late the log's writes wake a waiter.
const auditPoll = 20 * time.Millisecond

// KubeControllerManager is the Manager of the writes kube-controller-manager's controllers make, read from the
// audit log (their Controller is the controller's name, such as "replicaset-controller").
const KubeControllerManager = "kube-controller-manager"

// auditReader follows kube-apiserver's audit log (docs/architecture.md §3, "kube-controller-manager") and
// records each write it holds that no client of the harness sent: kube-controller-manager's, the API
// server's own, a client built from a kubeconfig Secret. It follows the file as it grows and across
// kube-apiserver's rotation (the file renamed, a new one made at the path).
type auditReader struct {
	path string
	s    *Suite
	// mu serialises reading: the poll loop and catchUp.
	mu sync.Mutex
	f  *os.File
	// partial is the start of a line not yet ended; buf is the read buffer.
	partial, buf []byte
	// kinds caches the kind of each resource the log names.
	kinds map[schema.GroupVersionResource]string
	quit  chan struct{}
	done  chan struct{}
}

// startAuditReader opens the audit log at path and follows it until stop. Errors: the log cannot be opened.
func (s *Suite) startAuditReader(path string) (*auditReader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("suite: kube-apiserver's audit log, which it makes at its start: %w (rebuild the binaries with `make envtest-assets`)", err)
	}
	a := &auditReader{path: path, s: s, f: f, kinds: map[schema.GroupVersionResource]string{}, quit: make(chan struct{}), done: make(chan struct{})}
	go a.run()
	return a, nil
}

func (a *auditReader) run() {
	defer close(a.done)
	t := time.NewTicker(auditPoll)
	defer t.Stop()
	for {
		select {
		case <-a.quit:
			return
		case <-t.C:
		}
		a.mu.Lock()
		a.readLocked()
		a.followRotation()
		a.mu.Unlock()
	}
}

// stop ends the poll loop and closes the log; safe to call on a nil reader.
func (a *auditReader) stop() {
	if a == nil {
		return
	}
	close(a.quit)
	<-a.done
	a.mu.Lock()
	_ = a.f.Close()
	a.f = nil
	a.mu.Unlock()
}

// catchUp records every write the log holds now; safe to call on a nil reader.
func (a *auditReader) catchUp() {
	if a == nil {
		return
	}
	a.mu.Lock()
	a.readLocked()
	a.mu.Unlock()
}

// readLocked reads the open file to its end and records the writes of its whole lines.
func (a *auditReader) readLocked() {
	if a.f == nil {
		return
	}
	if a.buf == nil {
		a.buf = make([]byte, 64<<10)
	}
	for {
		n, err := a.f.Read(a.buf)
		if n > 0 {
			a.lines(a.buf[:n])
		}
		if err != nil || n == 0 {
			return
		}
	}
}

// lines records the writes of the whole lines of b, keeping a last unended line for the next read.
func (a *auditReader) lines(b []byte) {
	for {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			a.partial = append(a.partial, b...) // a copy: buf is read into again
			return
		}
		line := b[:i]
		if len(a.partial) > 0 {
			line = append(a.partial, line...)
			a.partial = nil
		}
		a.record(line)
		b = b[i+1:]
	}
}

// followRotation opens the file now at the path when kube-apiserver rotated the log: it renames the file it
// wrote and makes a new one, so once the renamed file is read to its end (readLocked just did), the rest is
// in the new one.
func (a *auditReader) followRotation() {
	if a.f == nil {
		return
	}
	now, err := os.Stat(a.path)
	if err != nil {
		return // between the rename and the new file
	}
	cur, err := a.f.Stat()
	if err != nil || sameFile(now, cur) {
		return
	}
	next, err := os.Open(a.path)
	if err != nil {
		return
	}
	a.readLocked() // what was written to the old file since
	_ = a.f.Close()
	a.f, a.partial = next, nil
	a.readLocked()
}

func sameFile(a, b os.FileInfo) bool {
	x, ok1 := a.Sys().(*syscall.Stat_t)
	y, ok2 := b.Sys().(*syscall.Stat_t)
	if !ok1 || !ok2 {
		return os.SameFile(a, b)
	}
	return x.Ino == y.Ino && x.Dev == y.Dev
}

// auditEvent is the part of an audit.k8s.io/v1 Event the reader uses.
type auditEvent struct {
	AuditID    string `json:"auditID"`
	Stage      string `json:"stage"`
	RequestURI string `json:"requestURI"`
	Verb       string `json:"verb"`
	User       struct {
		Username string `json:"username"`
	} `json:"user"`
	UserAgent string `json:"userAgent"`
	ObjectRef *struct {
		Resource    string    `json:"resource"`
		Namespace   string    `json:"namespace"`
		Name        string    `json:"name"`
		UID         types.UID `json:"uid"`
		APIGroup    string    `json:"apiGroup"`
		APIVersion  string    `json:"apiVersion"`
		Subresource string    `json:"subresource"`
	} `json:"objectRef"`
	ResponseStatus *metav1.Status   `json:"responseStatus"`
	RequestObject  *auditObject     `json:"requestObject"`
	ResponseObject *auditObject     `json:"responseObject"`
	StageTimestamp metav1.MicroTime `json:"stageTimestamp"`
}

// auditObject is the part of a request or response object the reader uses: an object's metadata, or a
// Status's details (a delete answers with one).
type auditObject struct {
	Metadata struct {
		Name              string                  `json:"name"`
		UID               types.UID               `json:"uid"`
		ResourceVersion   string                  `json:"resourceVersion"`
		OwnerReferences   []metav1.OwnerReference `json:"ownerReferences"`
		DeletionTimestamp *metav1.Time            `json:"deletionTimestamp"`
	} `json:"metadata"`
	Details *struct {
		UID types.UID `json:"uid"`
	} `json:"details"`
}

// auditVerbs maps the audit log's write verbs to the recorder's.
var auditVerbs = map[string]Verb{"create": VerbCreate, "update": VerbUpdate, "patch": VerbPatch, "delete": VerbDelete, "deletecollection": VerbDeleteAllOf}

// record records the write of one line of the log, unless a client of the harness sent it (auditIDPrefix),
// it is no write, or the line does not parse (a line cut short when the file was rotated).
func (a *auditReader) record(line []byte) {
	// kube-apiserver writes auditID near the start of the line: a harness client's event is skipped without
	// decoding its objects.
	if i := bytes.Index(line, []byte(`"auditID":"`)); i >= 0 && bytes.HasPrefix(line[i+len(`"auditID":"`):], []byte(auditIDPrefix)) {
		return
	}
	var ev auditEvent
	if json.Unmarshal(line, &ev) != nil || strings.HasPrefix(ev.AuditID, auditIDPrefix) || ev.ObjectRef == nil ||
		(ev.Stage != "ResponseComplete" && ev.Stage != "Panic") {
		return
	}
	verb, ok := auditVerbs[ev.Verb]
	if !ok {
		return
	}
	ref := ev.ObjectRef
	w := Write{Time: ev.StageTimestamp.Local(), Verb: verb, Subresource: ref.Subresource, Namespace: ref.Namespace, Name: ref.Name, UID: ref.UID, audited: true}
	w.Manager, w.Controller = auditWriter(ev.User.Username, ev.UserAgent)
	w.Kind = a.kind(schema.GroupVersionResource{Group: ref.APIGroup, Version: ref.APIVersion, Resource: ref.Resource})
	if u, err := url.Parse(ev.RequestURI); err == nil {
		w.FieldOwner = u.Query().Get("fieldManager")
	}
	code := int32(0)
	if ev.ResponseStatus != nil {
		code = ev.ResponseStatus.Code
	}
	if code < 200 || code > 299 {
		st := metav1.Status{Status: metav1.StatusFailure, Code: code}
		if ev.ResponseStatus != nil {
			st = *ev.ResponseStatus
		}
		if st.Message == "" {
			st.Message = fmt.Sprintf("the API server answered %d", code)
		}
		w.Err = &apierrors.StatusError{ErrStatus: st}
		// The object the writer sent, when the API server got as far as decoding it (not for a request
		// authorization refused: such a create names no object).
		if o := ev.RequestObject; o != nil {
			if w.UID == "" {
				w.UID = o.Metadata.UID
			}
			if w.Name == "" && verb == VerbCreate {
				w.Name = o.Metadata.Name
			}
		}
	} else if o := ev.ResponseObject; o != nil {
		if w.Name == "" && verb != VerbDeleteAllOf {
			w.Name = o.Metadata.Name // a create with generateName
		}
		switch {
		case o.Metadata.UID != "":
			w.UID = o.Metadata.UID
		case o.Details != nil && o.Details.UID != "":
			w.UID = o.Details.UID
		}
		// As the recording transport keeps it (keepsResourceVersion).
		if keepsResourceVersion(verb, w.Subresource, o.Metadata.DeletionTimestamp != nil) {
			w.ResourceVersion = o.Metadata.ResourceVersion
		}
		if verb == VerbCreate && w.Namespace == "" && w.Subresource == "" {
			a.claim(ref.APIGroup, ref.APIVersion, w.Kind, w.Name, o.Metadata.OwnerReferences)
		}
	}
	a.s.rec.addWrite(w)
}

// claim claims a cluster-scoped object a writer the harness does not record created for the Case that
// claimed one of its owners, as the recording client does (scopes.claimCreated).
func (a *auditReader) claim(group, version, kind, name string, refs []metav1.OwnerReference) {
	var mo []metaOwner
	for _, r := range refs {
		mo = append(mo, metaOwner{Kind: r.Kind, Name: r.Name, UID: r.UID})
	}
	if ns := a.s.rec.scopes.ownersScope(mo); ns != "" {
		a.s.rec.scopes.claimFor(ns, schema.GroupVersionKind{Group: group, Version: version, Kind: kind}, name)
	}
}

// kind is the kind of resource gvr, through the API server's discovery; the resource's name when it is no
// longer served (a CRD removed since) or there is no client to ask.
func (a *auditReader) kind(gvr schema.GroupVersionResource) string {
	if k, ok := a.kinds[gvr]; ok {
		return k
	}
	k := gvr.Resource
	if a.s.Client != nil {
		if gvk, err := a.s.Client.RESTMapper().KindFor(gvr); err == nil {
			k = gvk.Kind
		}
	}
	a.kinds[gvr] = k
	return k
}

// defaultUserAgent is client-go's default User-Agent, "<binary>/<version> (<os>/<arch>) kubernetes/<commit>",
// with what a program appends ("/<controller>", as kube-controller-manager's controllers do).
var defaultUserAgent = regexp.MustCompile(`^[^/ ]+/[^ ]+ \([^)]*\) kubernetes/[^/ ]+(?:/(.+))?$`)

// auditWriter names the writer of a write the audit log holds: kube-controller-manager by its user, with
// the controller its User-Agent ends with; any other writer by its user name, with the controller its
// User-Agent appends to client-go's default form (none when it has another form).
func auditWriter(user, agent string) (manager, controller string) {
	if m := defaultUserAgent.FindStringSubmatch(agent); m != nil {
		controller = m[1]
	}
	if user == controlplane.KubeControllerManagerUser {
		return KubeControllerManager, controller
	}
	return user, controller
}
