// Package hakeeper is the MatrixOne operator's view of HAKeeper, the cluster's metadata service: the CN store
// registry of one LogSet and the calls the operator makes on it. fakes/hakeeperfake implements it; production
// would talk to the real service. Nothing here knows it is under test.
package hakeeper

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
)

// Errors of the HAKeeper calls.
var (
	// ErrStoreNotExist is returned for a CN store HAKeeper does not know (the real error text is "does not
	// exist"); reclaim and removal paths ignore it.
	ErrStoreNotExist = errors.New("cn store does not exist")
	// ErrNotInCache is returned by the operator's store cache when a store is not (yet) in it: "store not
	// found in cache".
	ErrNotInCache = errors.New("store not found in cache")
	// ErrNoInstance is returned by Registry.Instance for a LogSet that has no HAKeeper instance (not Ready).
	ErrNoInstance = errors.New("no HAKeeper instance for this LogSet")
)

// WorkState is a CN store's work state in HAKeeper.
type WorkState string

// The CN store work states.
const (
	WorkStateUnknown  WorkState = "Unknown"
	WorkStateWorking  WorkState = "Working"
	WorkStateDraining WorkState = "Draining"
	WorkStateDrained  WorkState = "Drained"
)

// Label is one CN label: a key and its values (a CNClaim's spec.cnLabels entry).
type Label struct {
	Key    string   `json:"key"`
	Values []string `json:"values"`
}

// CNStore is a CN store as HAKeeper reports it.
type CNStore struct {
	// UUID is the store's ID, StoreUUID of its pod.
	UUID string
	// Namespace and PodName locate the CN pod the store runs in.
	Namespace, PodName string
	// WorkState is the store's work state.
	WorkState WorkState
	// Labels are the store's labels, sorted by Key.
	Labels []Label
	// Sessions, Pipelines and Replicas are the CN process's open client sessions, running pipelines and
	// replicas (counts), as the process reports them; a drain brings Sessions to 0.
	Sessions, Pipelines, Replicas int
}

// ClusterDetails is HAKeeper's view of the cluster: its CN stores.
type ClusterDetails struct {
	CNStores []CNStore
}

// Client is one LogSet's HAKeeper instance, as the operator calls it. Every call may fail with a
// transport error; the store calls fail with ErrStoreNotExist for an unknown uuid.
type Client interface {
	// GetClusterDetails returns every CN store of the instance.
	GetClusterDetails(ctx context.Context) (ClusterDetails, error)
	// PatchCNStore sets the store's work state and, when labels is not empty, its labels (empty labels are
	// ignored: clearing them takes UpdateCNLabel).
	PatchCNStore(ctx context.Context, uuid string, state WorkState, labels []Label) error
	// UpdateCNLabel replaces the store's labels (nil clears them).
	UpdateCNLabel(ctx context.Context, uuid string, labels []Label) error
	// UpdateCNWorkState sets the store's work state.
	UpdateCNWorkState(ctx context.Context, uuid string, state WorkState) error
	// DeleteCNStore removes the store.
	DeleteCNStore(ctx context.Context, uuid string) error
	// GetCNState returns the store.
	GetCNState(ctx context.Context, uuid string) (CNStore, error)
}

// Registry hands out the HAKeeper instance of a LogSet, the one its status discovery address names.
type Registry interface {
	// Instance returns the instance of LogSet namespace/logSet; ErrNoInstance when it has none.
	Instance(ctx context.Context, namespace, logSet string) (Client, error)
}

// StoreUUID is the deterministic CN store UUID of a pod: a SHA-256 of namespace, pod name and subdomain,
// rendered in the 8-4-4-4-12 UUID shape. The operator and the CN process (fakes/hakeeperfake) both derive it.
func StoreUUID(namespace, pod, subdomain string) string {
	sum := sha256.Sum256([]byte(namespace + "/" + pod + "." + subdomain))
	h := hex.EncodeToString(sum[:16])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}
