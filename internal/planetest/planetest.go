// Package planetest is the TestMain of the package tests that run against an envtest control plane of their
// own rather than through suite.Boot (operators/multigres, operators/matrixone, fakes/dataplane, fakes/pooler,
// fakes/hakeeperfake): it starts the plane, runs the package's setup, then its tests, and stops both. Only
// tests import it.
package planetest

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"go.uber.org/zap/zapcore"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/ensembletest/ensemble/internal/controlplane"
)

// Options says how Run prepares a package's tests.
type Options struct {
	// SkipShort runs the tests without a control plane (and without Setup) under -short, for a package whose
	// envtest tests skip themselves then.
	SkipShort bool
	// Logger becomes controller-runtime's logger; the zero Logger drops everything (ErrorLogger keeps errors).
	Logger logr.Logger
	// CRDs are the directories of the CRDs to install, relative to the package's directory; each must exist.
	CRDs []string
	// Setup runs once the plane is up, with the plane's config (an administrator's; Setup may change it). The
	// tests run when it returned no error; then stop runs (when not nil), and its error is printed.
	Setup func(cfg *rest.Config) (stop func() error, err error)
}

// Run starts the control plane, runs o.Setup and the tests, and stops the plane, and returns the exit code
// for os.Exit: 1, with the error printed to stderr, when the plane does not start or Setup fails.
func Run(m *testing.M, o Options) int {
	if o.SkipShort {
		flag.Parse() // testing.Short reads the parsed flags; m.Run parses them only later
		if testing.Short() {
			return m.Run()
		}
	}
	ctrl.SetLogger(o.Logger)
	env := &envtest.Environment{}
	if len(o.CRDs) > 0 {
		env.CRDDirectoryPaths = o.CRDs
		env.ErrorIfCRDPathMissing = true
	}
	plane, err := controlplane.Start(env, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = plane.Stop() }()
	stop, err := o.Setup(plane.Config)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := m.Run()
	if stop != nil {
		if err := stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}
	return code
}

// ManagerSetup is the Setup of tests that share one manager: it makes *k8s a direct client with client-go's
// kinds, and runs a manager of those kinds whose controllers register sets up (metrics off, controller names
// free to repeat) from then until the tests end. Its stop cancels the manager and waits at most 10 s for it
// to return. Errors, each prefixed "manager: ": the manager's own, register's, or the timeout.
func ManagerSetup(k8s *client.Client, register func(ctrl.Manager) error) func(*rest.Config) (func() error, error) {
	return func(cfg *rest.Config) (func() error, error) {
		c, err := client.New(cfg, client.Options{Scheme: clientgoscheme.Scheme})
		if err != nil {
			return nil, err
		}
		*k8s = c
		mgr, err := ctrl.NewManager(cfg, ctrl.Options{
			Scheme:     clientgoscheme.Scheme,
			Metrics:    metricsserver.Options{BindAddress: "0"},
			Controller: config.Controller{SkipNameValidation: new(true)},
		})
		if err != nil {
			return nil, fmt.Errorf("manager: %w", err)
		}
		if err := register(mgr); err != nil {
			return nil, fmt.Errorf("manager: %w", err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- mgr.Start(ctx) }()
		return func() error {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					return fmt.Errorf("manager: %w", err)
				}
				return nil
			case <-time.After(10 * time.Second):
				return fmt.Errorf("manager: ensemble: manager did not stop within 10s")
			}
		}, nil
	}
}

// ErrorLogger writes controller-runtime's errors to stderr and drops its info logs, which are noise in a
// package test.
func ErrorLogger() logr.Logger {
	return zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.ErrorLevel))
}
