//go:build tools

// Package tools pins the etcd server main package so that `go mod tidy` keeps its dependencies.
package tools

import _ "go.etcd.io/etcd/server/v3"
