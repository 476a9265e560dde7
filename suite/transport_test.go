package suite

import (
	"bytes"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
)

// TestDecodeMetaReadsEveryBodyForm checks that a request or answer body gives the same metadata whether it
// is JSON (a create, an apply sent as apply-patch+yaml), YAML or protobuf, and that a delete's Status gives
// its details.
func TestDecodeMetaReadsEveryBodyForm(t *testing.T) {
	want := sentMeta{name: "p", rv: "42", uid: "u-1", owners: []metaOwner{{Kind: "ReplicaSet", Name: "rs", UID: "u-0"}}}
	jsonBody := `{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p","resourceVersion":"42","uid":"u-1",
		"ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"rs","uid":"u-0","controller":true}],
		"managedFields":[{"manager":"m","operation":"Update","fieldsType":"FieldsV1","fieldsV1":{"f:spec":{}}}]},
		"spec":{"containers":[{"name":"c","image":"i"}]}}`
	yamlBody := "kind: Pod\nmetadata:\n  name: p\n  resourceVersion: \"42\"\n  uid: u-1\n  ownerReferences:\n  - kind: ReplicaSet\n    name: rs\n    uid: u-0\n"
	pod := &corev1.Pod{TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"}, ObjectMeta: metav1.ObjectMeta{Name: "p", ResourceVersion: "42", UID: "u-1",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "u-0"}}}}
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	var pb bytes.Buffer
	if err := protobuf.NewSerializer(scheme, scheme).Encode(pod, &pb); err != nil {
		t.Fatal(err)
	}
	s := &Suite{scheme: scheme}
	for _, tc := range []struct {
		what, contentType string
		body              []byte
		want              sentMeta
	}{
		{"JSON", "application/json", []byte(jsonBody), want},
		{"an apply", "application/apply-patch+yaml", []byte("  " + jsonBody), want},
		{"YAML", "application/yaml", []byte(yamlBody), want},
		{"protobuf", "application/vnd.kubernetes.protobuf", pb.Bytes(), want},
		{"a delete's Status", "application/json", []byte(`{"kind":"Status","apiVersion":"v1","status":"Success","details":{"name":"p","kind":"pods","uid":"u-1"}}`),
			sentMeta{name: "p", uid: "u-1"}},
		{"a delete's answer left marked", "application/json", []byte(`{"kind":"Pod","metadata":{"name":"p","resourceVersion":"43","uid":"u-1","deletionTimestamp":"2026-12-06T01:00:00Z"}}`),
			sentMeta{name: "p", rv: "43", uid: "u-1", marked: true}},
		{"an empty body", "application/json", nil, sentMeta{}},
		{"a body that is no object", "application/json", []byte(`[1,2]`), sentMeta{}},
	} {
		if got := s.decodeMeta(tc.body, tc.contentType); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: decodeMeta = %+v, want %+v", tc.what, got, tc.want)
		}
	}
}
