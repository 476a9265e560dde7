package suite

import (
	"sort"
)

// FieldWriters tells which writers changed which fields of the case's object kind/name: for every leaf field
// path that changed (as in Change.Fields, e.g. "status.podRoles.pod-0"), the writers whose writes made
// those changes, sorted, each "manager/controller" (or the manager alone for a write outside a reconcile
// pass). It works where managedFields cannot tell controllers apart, because they share one field manager.
// A change is matched to the recorded write whose answer carried the same resourceVersion, the writes taken in
// the order they returned (Time). A write that changed
// nothing (a server-side apply of unchanged values, say) answers with the resourceVersion it found, the one an
// earlier write made; so among the writes that answered with one resourceVersion the change goes to the first
// whose subresource fits its fields (status fields: the status subresource; other fields: the main resource),
// else to the first. Two writes of one subresource that return in the same instant with one resourceVersion (a
// change and a no-op that found it) cannot be told apart: the first to return is named, which may be the no-op.
// kube-controller-manager's writes and any other client's that the harness does not record itself are read
// from kube-apiserver's audit log, so they are named too ("kube-controller-manager/replicaset-controller"). A
// change no recorded write answered with its resourceVersion (a subresource create's, a pod binding; the
// harness's administrator client's; a client sent with the harness's Audit-ID that it does not record) is
// "<unrecorded>". A
// field with two or more writers is a field two controllers both write. Only changes after the object's
// creation count: who created it is the VerbCreate write in Writes. The kind must be in Options.WatchKinds
// (the event stream sees only those); for another kind the map is empty.
func (c *Case) FieldWriters(kind, name string) map[string][]string {
	// The changes first: a change is seen once its write was made, so the writes read after them hold the
	// write of each (read the other way round, a change that arrived in between has no write yet).
	changes := c.s.stream.changes(c.Namespace, ChangeFilter{Kind: kind, Name: name, Type: Modified})
	byRV := map[string][]Write{}
	for _, w := range c.s.rec.writes(c.Namespace, WriteFilter{Kind: kind, Name: name, IncludeRejected: true}) {
		if w.ResourceVersion != "" {
			byRV[w.ResourceVersion] = append(byRV[w.ResourceVersion], w)
		}
	}
	sets := map[string]map[string]bool{}
	for _, ch := range changes {
		who := changeWriter(ch, byRV[ch.ResourceVersion])
		for _, f := range ch.Fields {
			if sets[f.Path] == nil {
				sets[f.Path] = map[string]bool{}
			}
			sets[f.Path][who] = true
		}
	}
	out := map[string][]string{}
	for path, set := range sets {
		for who := range set {
			out[path] = append(out[path], who)
		}
		sort.Strings(out[path])
	}
	return out
}

// changeWriter picks, among the writes that answered with ch's resourceVersion (by Time, oldest first), the one that
// made ch: the first whose subresource fits ch's fields, else the first; "<unrecorded>" when there is none.
func changeWriter(ch Change, writes []Write) string {
	if len(writes) == 0 {
		return "<unrecorded>"
	}
	status := len(ch.Fields) > 0
	for _, f := range ch.Fields {
		status = status && under(f.Path, "status")
	}
	for _, w := range writes {
		if (w.Subresource == "status") == status {
			return w.writer()
		}
	}
	return writes[0].writer()
}
