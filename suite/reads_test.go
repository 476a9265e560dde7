package suite

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/ensembletest/ensemble/suite/perturb"
)

func TestReadLogTakesACasesReads(t *testing.T) {
	l := newReadLog()
	ctx := context.Background()
	before := time.Now()
	since := time.Now()
	l.add(ctx, "mg", "Shard", "ns-1", "s")
	l.byNS["ns-1"][0].at = since.Add(-time.Second) // before the case began: left out
	pass := context.WithValue(ctx, passCtxKey{}, &Pass{Controller: "shard"})
	l.add(pass, "mg", "Shard", "ns-1", "s")
	l.add(ctx, "kubelet", "Node", "", "ns-1-cp-0")
	l.add(ctx, "mg", "Pod", "ns-2", "p") // another case's
	l.add(pass, "mg", "Pod", "ns-1", "")
	l.add(ctx, "mg", "", "ns-1", "x") // a kind nobody can name: not noted
	got := l.take("ns-1", since)
	var objects []string
	for _, r := range got {
		objects = append(objects, r.Reader+" "+r.Object)
		if r.At.Before(before) {
			t.Errorf("read %v has no time", r)
		}
	}
	want := []string{"mg/shard Shard/s", "kubelet Node/" + perturb.CaseNamespace + "-cp-0", "mg/shard Pod/"}
	if !reflect.DeepEqual(objects, want) {
		t.Errorf("take = %v; want %v", objects, want)
	}
	if again := l.take("ns-1", since); len(again) != 1 {
		t.Errorf("a second take holds %d reads; want only the cluster-wide one, the namespace's were forgotten", len(again))
	}
	var none *readLog
	none.add(ctx, "mg", "Shard", "ns-1", "s")
	if none.take("ns-1", since) != nil {
		t.Error("a nil log took reads")
	}
}
