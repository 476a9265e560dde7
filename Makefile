# ensemble: run every reconciler of an operator at once against one envtest API server.
# `make help` lists the targets.

SHELL := /usr/bin/env bash
GO ?= go
BIN := $(CURDIR)/bin
CONTROLLER_GEN_VERSION := v0.23.0
CONTROLLER_GEN := $(BIN)/controller-gen
# ENVTEST_ASSETS is where tools/envtest/build.sh puts (or finds) kube-apiserver, kube-controller-manager and etcd.
ENVTEST_ASSETS = $(shell tools/envtest/build.sh --dir)
REPORT_DIR ?=
GINKGO_FLAGS ?=
SUITE_TIMEOUT ?= 20m

.PHONY: help
help: ## List the targets.
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN{FS=":.*## "}{printf "  %-18s %s\n", $$1, $$2}'

.PHONY: envtest-assets
envtest-assets: ## Build kube-apiserver v1.37.2, kube-controller-manager v1.37.2 and etcd v3.6.16 from their Go modules (skipped when present).
	@tools/envtest/build.sh >/dev/null

$(CONTROLLER_GEN):
	GOBIN=$(BIN) $(GO) install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_GEN_VERSION)

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Regenerate CRDs and deepcopy for the reference operators (commit the result).
	@for op in operators/*/; do \
	  [ -d "$$op/api" ] || continue; \
	  $(CONTROLLER_GEN) object paths="./$${op}api/..." && \
	  $(CONTROLLER_GEN) crd paths="./$${op}api/..." output:crd:artifacts:config="$${op}config/crd" || exit 1; \
	done

# The scenario tier is one Ginkgo suite in scenarios/; LABELS filters it (e.g. LABELS=multigres).
LABELS ?=
# With a label filter, a run that selects no spec fails (a typo in LABELS must not pass silently).
GINKGO_ARGS = $(if $(LABELS),-ginkgo.label-filter="$(LABELS)" -ginkgo.fail-on-empty) \
	$(if $(REPORT_DIR),-ginkgo.json-report=$(abspath $(REPORT_DIR))/suite.json -ginkgo.junit-report=$(abspath $(REPORT_DIR))/junit.xml) \
	$(GINKGO_FLAGS)

# The scenario suite runs after the other packages, not beside them: its rate measurements (the migration
# storm's passes per operator second) should not share the two cores with the operators' own envtest tests.
.PHONY: test
test: envtest-assets ## Unit tests, the scenario suite and the KubeRay example: what CI runs.
	KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) $(GO) test -count=1 -timeout $(SUITE_TIMEOUT) $$($(GO) list ./... | grep -v /scenarios$$)
	KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) $(GO) test -count=1 -timeout $(SUITE_TIMEOUT) ./scenarios/
	$(MAKE) --no-print-directory example

# examples/kuberay is a Go module of its own (KubeRay's dependencies stay out of ensemble's go.mod).
.PHONY: example
example: envtest-assets ## KubeRay v1.5.0's unmodified RayCluster, RayJob and RayService controllers under ensemble.
	cd examples/kuberay && KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) $(GO) test -count=1 -timeout $(SUITE_TIMEOUT) ./... -args -ginkgo.v

.PHONY: test-suite
test-suite: envtest-assets ## The scenario suite alone, verbose so pins are readable (REPORT_DIR=dir writes suite.json and junit.xml, LABELS=filter).
	@$(if $(REPORT_DIR),mkdir -p $(REPORT_DIR))
	KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) $(if $(REPORT_DIR),ENSEMBLE_ARTIFACTS=$(abspath $(REPORT_DIR))/artifacts) \
	  $(GO) test -count=1 -timeout $(SUITE_TIMEOUT) ./scenarios/ -v -args -ginkgo.v $(GINKGO_ARGS)

.PHONY: test-race
test-race: envtest-assets ## Unit tests and the scenario suite under the race detector.
	KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) $(GO) test -race -count=1 -timeout $(SUITE_TIMEOUT) ./...
