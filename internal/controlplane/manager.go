package controlplane

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/go-logr/logr"
	"go.uber.org/zap/zapcore"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// RunManager starts mgr in the background, for a package test's TestMain, and returns the func that stops
// it: it cancels the manager and waits at most 10 s for it to return. Errors: the manager's own, or the
// timeout.
func RunManager(mgr manager.Manager) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	return func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Second):
			return fmt.Errorf("ensemble: manager did not stop within 10s")
		}
	}
}

// ErrorLogger writes controller-runtime's errors to stderr and drops its info logs, which are noise in a
// package test.
func ErrorLogger() logr.Logger {
	return zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.ErrorLevel))
}
