// Package suite is ensemble's harness: it boots one envtest API server (real kube-apiserver and etcd), runs
// every reconciler of one or more operators against it at once, and gives scenario specs the vocabulary for
// defects that live between controllers: the writes each controller made and in which reconcile pass, the
// changes each watched object went through, which controller changed which field, quiescence, field-manager
// ownership, invariants and KnownDefect pins.
//
// The package knows no operator, and an operator needs no change to run under it. ManagerOptions.Register
// gets a manager and sets the operator up exactly as its main does, with its own SetupWithManager calls.
// ensemble then wraps every controller controller-runtime's builder makes. The wrapper holds the gate (only
// namespaces a Case admitted reach the reconciler), counts passes and shortens long RequeueAfter delays.
// Writes through the manager's client are recorded and attributed to the pass whose context they carry.
// A spec holds a Case and asks it everything. See the package example, and examples/kuberay in the
// repository for KubeRay's unmodified controllers under ensemble.
//
// Every case is judged at its end by oracles (HotLoop, SharedFields, Convergence, and Differential against
// unperturbed runs). Perturbation points (package suite/perturb, Case.Perturb, ENSEMBLE_PERTURB) answer a
// chosen write with an API error, restart its manager right after it, hold the written object from that
// manager's cache, or take an external system a fake plays down; they are triggered by writes or by an
// object's changes, never by the clock, so a point fires at the same place when rerun. See docs/architecture.md §3 Perturbation.
//
// # What ensemble cannot see
//
//   - A write made on a context that does not derive from the reconcile pass's or from a Runnable's Start
//     context (context.Background() in a reconciler, a goroutine the operator starts) is recorded under its
//     manager with no controller and no pass, and is not gated.
//   - A write through a client built on another rest.Config than the manager's (a kubeconfig the operator
//     reads, Suite.Config) is not recorded; its changes still show in the event stream, and FieldWriters
//     names them "<unrecorded>". Clients built on mgr.GetConfig() are recorded at its transport.
//   - A write no client of the harness sent (kube-controller-manager's, a client the operator builds from a
//     kubeconfig Secret or its own credentials, the API server's own) is read from kube-apiserver's audit log:
//     it is recorded under its user (kube-controller-manager's under its controller) with no pass, up to a
//     20 ms poll after it returned, and a patch is VerbPatch even when it was a server-side apply. Such writes
//     never pass a perturbation point and the HotLoop oracle does not count them.
//   - A controller that does not go through Manager.Add (one built with controller.NewUnmanaged and started
//     by the operator) is neither gated nor counted. One that goes through Add but cannot be wrapped (a
//     controller-runtime whose controllers no longer keep their reconciler in an exported Do field, or a
//     typed controller whose request is not reconcile.Request) stops Boot with one line that names the
//     controller and the controller-runtime version.
//   - Kinds that are not in Options.WatchKinds produce no Changes; quiescence and dumps look only at the
//     watched kinds.
//   - A cluster-scoped object belongs to a Case only once claimed (docs/architecture.md, "Cluster-scoped
//     objects"). One created by a writer ensemble does not record is claimed when the event stream sees it
//     with an owner the Case claimed, so its first request may be refused at the gate. The gate matches a
//     cluster-scoped request by name, since a request names no kind.
//   - There is no kubelet and no scheduler: pods stay Pending unless a manager such as fakes/dataplane binds
//     and runs them. kube-controller-manager runs only the controllers in Options.KubeControllers (by default
//     those that need no node and no cloud); its writes are recorded from the audit log.
//   - A write trigger (#n, %n, ~rate) counts the writes of the harness's own clients only, so a write read
//     from the audit log (kube-controller-manager's) never fires one. A change trigger (^n) counts every change of its object,
//     whoever made it, as its writer's manager's watch delivers it.
//   - One manager serves the operator's webhooks (Options.Webhooks): the first whose Register registers a
//     handler. Another instance's handlers are never called, and a webhook configuration the operator
//     creates itself at run time is not pointed at the serving manager. Admissions are recorded only for
//     the configured webhooks, conversions not at all.
//   - Requeue compression changes wall time, not order. A spec that measures a rate must measure it in the
//     operator's own time (OperatorTimeline, CountWakes).
package suite
