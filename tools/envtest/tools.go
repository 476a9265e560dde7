//go:build tools

// Package tools pins the kube-apiserver main package so that `go mod tidy` keeps its dependencies.
package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
