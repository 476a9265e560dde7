module github.com/kubeflow/trainer/v2

go 1.26.0

require k8s.io/apimachinery v0.37.2
