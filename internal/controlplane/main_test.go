package controlplane

import (
	"os"
	"testing"

	"github.com/go-logr/logr"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// TestMain gives controller-runtime's logger a sink before envtest logs through it, as suite.Boot does before
// it starts a plane, so the tests' output carries no "log.SetLogger(...) was never called" stack.
func TestMain(m *testing.M) {
	logf.SetLogger(logr.Discard())
	os.Exit(m.Run())
}
