package controlplane

import (
	"fmt"
	"os"
	"path/filepath"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// auditPolicy is the audit policy kube-apiserver runs with (docs/architecture.md §3, "kube-controller-manager"):
// every write (create, update, patch, delete, deletecollection) at level RequestResponse, the cheapest level
// whose event carries the response object, whose resourceVersion ties the write to the change it made; only the
// ResponseComplete stage (and Panic); managedFields left out. Reads and watches are not logged, nor Events
// (kube-controller-manager writes them all the time, and the harness records no Event write of any writer),
// nor token and access reviews (requests, not objects).
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
omitManagedFields: true
rules:
- level: None
  resources:
  - group: ""
    resources: ["events"]
  - group: "events.k8s.io"
    resources: ["events"]
  - group: "authentication.k8s.io"
  - group: "authorization.k8s.io"
- level: RequestResponse
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
- level: None
`

// auditLogMaxSize is the size in megabytes at which kube-apiserver rotates the audit log (it renames the
// file and starts a new one; the reader follows, see suite's audit reader). One backup is kept: the reader
// holds the rotated file open until it has read it to the end.
const auditLogMaxSize = 20

// useAudit writes the audit policy into dir and points env's kube-apiserver at it, with its JSON log at
// auditLogPath(dir) in blocking mode (an event is written before its request's handler returns). Errors: the
// policy file cannot be written.
func useAudit(env *envtest.Environment, dir string) error {
	policy := filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o600); err != nil {
		return fmt.Errorf("ensemble: cannot write kube-apiserver's audit policy: %v: point TMPDIR at a writable directory", err)
	}
	env.ControlPlane.GetAPIServer().Configure().
		Set("audit-policy-file", policy).
		Set("audit-log-path", auditLogPath(dir)).
		Set("audit-log-format", "json").
		Set("audit-log-mode", "blocking").
		Set("audit-log-maxsize", fmt.Sprint(auditLogMaxSize)).
		Set("audit-log-maxbackup", "1")
	return nil
}

func auditLogPath(dir string) string { return filepath.Join(dir, "audit.log") }

// AuditLog is the path of kube-apiserver's audit log: one JSON audit.k8s.io/v1 Event per line, one for each
// write any client made (auditPolicy), appended as each write completes. kube-apiserver rotates it at
// auditLogMaxSize megabytes (renames it and starts a new file at the same path). It is removed with the
// plane's working directory at Stop.
func (p *Plane) AuditLog() string { return auditLogPath(p.dir) }
