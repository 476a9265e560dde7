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

# The timeline's browser test (suite/timeline_test.go) opens its page in Chrome or Chromium. tools/browser/browser.sh
# finds one (CHROME, then the names chromedp looks for) or installs Debian's chromium with apt-get; make passes the
# path it found to go test as CHROME.
BROWSER_PATH = $(shell tools/browser/browser.sh --find)

.PHONY: browser
browser: ## Find Chrome or Chromium for the timeline's browser test (CHROME, then chromedp's names), else install Debian's chromium with apt-get; print its path.
	@tools/browser/browser.sh

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
# GINKGO_FLAGS are suite flags in the test binary's form (-ginkgo.focus=...), as bisect and flake pass them;
# the ginkgo command takes them without the prefix.
GINKGO_ARGS = $(if $(LABELS),--label-filter="$(LABELS)" --fail-on-empty) \
	$(if $(REPORT_DIR),--json-report=$(abspath $(REPORT_DIR))/suite.json --junit-report=$(abspath $(REPORT_DIR))/junit.xml) \
	$(subst -ginkgo.,--,$(GINKGO_FLAGS))
# The ginkgo command, at go.mod's version, runs the suite in SUITE_PROCS processes, each with its own envtest
# and its own sentinel: one process keeps about one core busy (the specs wait on the control plane more than
# they compute), so two halve the wall time on two cores (measured: 70 s in one, 48 s in two).
GINKGO := $(BIN)/ginkgo
SUITE_PROCS ?= 2
RUN_SUITE = KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) $(GINKGO) --procs=$(SUITE_PROCS) --timeout=$(SUITE_TIMEOUT)

$(GINKGO): go.mod go.sum
	$(GO) build -o $(GINKGO) github.com/onsi/ginkgo/v2/ginkgo

# The scenario suite runs after the other packages, not beside them: its rate measurements (the migration
# storm's passes per operator second) should not share the two cores with the operators' own envtest tests.
.PHONY: test
test: envtest-assets browser $(GINKGO) ## Unit tests, the scenario suite and the examples (KubeRay, Kueue, cluster-api): what CI runs.
	CHROME="$(BROWSER_PATH)" KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) $(GO) test -count=1 -timeout $(SUITE_TIMEOUT) $$($(GO) list ./... | grep -v /scenarios$$)
	$(RUN_SUITE) $(GINKGO_ARGS) ./scenarios
	$(MAKE) --no-print-directory example

# Each example is a public operator, unmodified at a pinned version, in a Go module of its own (its
# dependencies stay out of ensemble's go.mod). EXAMPLES picks some (EXAMPLES=kueue); make test runs them all.
# An example at another version is a module in a directory named after it under the example's
# (examples/cluster-api/v1.13.5/, whose other files link the example's, so the specs are one source): it is
# named example@version (EXAMPLES=cluster-api@v1.13.5) and make test leaves it out.
EXAMPLES ?= kuberay kueue cluster-api
.PHONY: example
example: envtest-assets ## The examples, verbose: KubeRay v1.5.0, Kueue v0.17.0 and cluster-api v1.14.2, unmodified under ensemble (EXAMPLES=kueue runs one; EXAMPLES=cluster-api@v1.13.5 the same specs at another version).
	@known="$$(cd examples && { ls -d */ | tr -d /; for m in */v*/go.mod; do [ -e "$$m" ] || continue; d="$${m%/go.mod}"; echo "$${d%%/*}@$${d#*/}"; done; } | sort | tr '\n' ' ' | sed 's/ $$//')"; \
	[ -n "$(strip $(EXAMPLES))" ] || { echo "make example: EXAMPLES is empty: name one or more of $$known" >&2; exit 2; }; \
	for e in $(EXAMPLES); do case " $$known " in *" $$e "*) ;; *) echo "make example: no example $$e (there are: $$known)" >&2; exit 2;; esac; done
	@for e in $(EXAMPLES); do \
	  d="examples/$${e/@//}"; \
	  echo "== $$d"; \
	  (cd $$d && KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) $(GO) test -count=1 -timeout $(SUITE_TIMEOUT) -v ./... -args -ginkgo.v) || exit 1; \
	done

.PHONY: test-suite
test-suite: envtest-assets $(GINKGO) ## The scenario suite alone, verbose so pins are readable (REPORT_DIR=dir writes suite.json and junit.xml, LABELS=filter, SUITE_PROCS=processes).
	@$(if $(REPORT_DIR),mkdir -p $(REPORT_DIR))
	$(if $(REPORT_DIR),ENSEMBLE_ARTIFACTS=$(abspath $(REPORT_DIR))/artifacts) $(RUN_SUITE) -v $(GINKGO_ARGS) ./scenarios

.PHONY: test-race
test-race: envtest-assets browser $(GINKGO) ## Unit tests, the scenario suite and the KubeRay example under the race detector.
	CHROME="$(BROWSER_PATH)" KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) $(GO) test -race -count=1 -timeout $(SUITE_TIMEOUT) $$($(GO) list ./... | grep -v /scenarios$$)
	$(RUN_SUITE) --race $(GINKGO_ARGS) ./scenarios
	cd examples/kuberay && KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) $(GO) test -race -count=1 -timeout $(SUITE_TIMEOUT) ./...

# defect-matrix: ensemble defect-matrix learns the scenario suite's catalog (pins/catalog.go, its
# Options.Pins) from the suite, flips each entry in turn and runs its operator's specs (the multigres or
# matrixone label); it fails when an entry flips none of its own specs. IDS=ID,ID flips only those entries.
IDS ?=

# The commands are built into bin/ and run directly, not with go run: GNU make forwards SIGTERM to its
# child (not SIGINT: a Ctrl-C reaches the whole terminal group anyway), and go run dies of SIGTERM
# without passing it on, which left the command and its envtest running. Phony: go build decides what
# is stale. bin/ensemble is cmd/ensemble, the commands any module runs (explore, mutate, flake, bisect,
# defect-matrix); bugs is this repository's.
ENSEMBLE := $(BIN)/ensemble
.PHONY: $(ENSEMBLE)
$(ENSEMBLE):
	@$(GO) build -o $@ ./cmd/ensemble
COMMANDS := $(addprefix $(BIN)/,bugs)
.PHONY: $(COMMANDS)
$(COMMANDS): $(BIN)/%:
	@$(GO) build -o $@ ./internal/cmd/$*

.PHONY: defect-matrix

# bugs: internal/cmd/bugs reproduces each known bug of examples/bugs.yaml at its buggy version (an example's
# ordinary spec, unperturbed or with explore's budget over it) and checks the same at its fixed version; entries
# with the same example, buggy version, spec and explore options share one run (a sweep with an -until each).
BUGS ?=
.PHONY: bugs
bugs: envtest-assets $(BIN)/bugs $(ENSEMBLE) ## Known bugs of the examples' operators, found at their buggy versions and not at the fixed ones: bug | operator | buggy | fixed | found by | points tried | time to find | verdict at fixed (BUGS=ID,ID; EXPLORE_JOBS=n; REPORT_DIR=dir).
	@$(if $(REPORT_DIR),mkdir -p $(REPORT_DIR))
	KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) $(BIN)/bugs -ensemble $(ENSEMBLE) -timeout $(SUITE_TIMEOUT) -j $(EXPLORE_JOBS) \
	  $(if $(BUGS),-bugs "$$BUGS") $(if $(REPORT_DIR),-report-dir $(abspath $(REPORT_DIR)))
defect-matrix: envtest-assets $(ENSEMBLE) ## Flip each catalog entry in turn and check that its own specs change verdict: the matrix, non-zero when one flips none (IDS=ID,ID; REPORT_DIR=dir writes defect-matrix.json and each run's report).
	@$(if $(REPORT_DIR),mkdir -p $(REPORT_DIR))
	KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) $(ENSEMBLE) defect-matrix -suite ./scenarios -operators multigres,matrixone -timeout $(SUITE_TIMEOUT) \
	  $(if $(IDS),-ids "$(IDS)") $(if $(REPORT_DIR),-report-dir $(abspath $(REPORT_DIR)))

# make bisect and make flake run ensemble bisect and ensemble flake on ./scenarios. GOOD, BAD, FOCUS, LABELS
# and GINKGO_FLAGS reach them through the environment as make got them, quotes and spaces included. A
# missing one ends in one line, checked before the prerequisites (no envtest build first).
BISECT_NEEDS_GOOD = make bisect: pass GOOD=<rev>, a commit at which the FOCUS specs pass, and FOCUS=<spec regexp>, e.g. make bisect GOOD=HEAD~20 FOCUS='becomes Healthy'
BISECT_NEEDS_FOCUS = make bisect: pass FOCUS=<spec regexp>, the spec(s) that fail at BAD ($(or $(BAD),HEAD)) and pass at GOOD=$(GOOD), e.g. FOCUS='becomes Healthy'
FLAKE_NEEDS_N = make flake: pass N=<runs>, how many times to run the suite, e.g. make flake N=10 FOCUS=harness
$(if $(filter bisect,$(MAKECMDGOALS)),$(if $(GOOD),,$(error $(BISECT_NEEDS_GOOD)))$(if $(FOCUS),,$(error $(BISECT_NEEDS_FOCUS))))
$(if $(filter flake,$(MAKECMDGOALS)),$(if $(N),,$(error $(FLAKE_NEEDS_N))))
# The suite flags both pass on: GINKGO_FLAGS, in the test binary's form.
SUITE_RUN_FLAGS = -suite ./scenarios -timeout $(SUITE_TIMEOUT) $(if $(GINKGO_FLAGS),-ginkgo-flags "$$GINKGO_FLAGS") \
	$(if $(REPORT_DIR),-report-dir $(abspath $(REPORT_DIR)))

.PHONY: bisect
bisect: envtest-assets $(ENSEMBLE) ## First commit at which FOCUS=<spec regexp> fails: GOOD=<rev> [BAD=HEAD]; git bisect in a throw-away worktree, your checkout untouched.
	@KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) $(ENSEMBLE) bisect -good "$$GOOD" $(if $(BAD),-bad "$$BAD") -focus "$$FOCUS" $(SUITE_RUN_FLAGS)

.PHONY: flake
flake: envtest-assets $(ENSEMBLE) ## Run the scenario suite (or FOCUS=regexp, LABELS=filter) N=<runs> times: the first failing run's failure, else N/N passed and per-spec min/median/max times.
	@KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) $(ENSEMBLE) flake -n "$(N)" $(if $(FOCUS),-focus "$$FOCUS") $(if $(LABELS),-labels "$$LABELS") $(SUITE_RUN_FLAGS)

# explore: ensemble explore (internal/explore) runs the FOCUS specs unperturbed twice, then each on its own once per
# perturbation point (each write of each controller and fake, and each change a manager's watch delivered, each of
# MODES, all by default), pruned by causality (PRUNE=false keeps every point), within BUDGET (points, or a
# duration such as 20m), BATCH runs of one spec per test process, and prints
# point | mode | verdict | first difference with a command that reruns each failing point. FOCUS, MODES and POINTS
# reach it through the environment as make got them, quotes, '#' and spaces included. SUITE names another Ginkgo
# suite's directory (examples/kuberay; default ./scenarios); EXPLORE_JOBS runs test processes at once, each with
# its own envtest.
EXPLORE_NEEDS_FOCUS = make explore: pass FOCUS=<spec regexp>, the specs to perturb, e.g. make explore FOCUS='becomes Healthy' BUDGET=6
# Checked before the prerequisites, so a missing FOCUS is said before any envtest build.
$(if $(filter explore,$(MAKECMDGOALS)),$(if $(FOCUS),,$(error $(EXPLORE_NEEDS_FOCUS))))
MODES ?=
BUDGET ?=
POINTS ?=
REPEAT ?=
SUITE ?=
LAG ?=
UNTIL ?=
SHARD ?=
FROM ?=
PRUNE ?=
MERGE ?=
BATCH ?=
EXPLORE_JOBS ?= 1

.PHONY: explore
explore: envtest-assets $(ENSEMBLE) ## Perturb the FOCUS=<spec regexp> specs one point at a time and compare with their unperturbed runs: point | mode | verdict | first difference, a rerun command per failing point (MODES=a,b|all (all), PRUNE=false runs the points the pruning leaves out, BUDGET=40|20m, POINTS=, REPEAT=n, SUITE=examples/kuberay, LAG=15s, UNTIL=<regexp> stops at the first point whose failure it matches (. for any) and says which point, after how many and when, SHARD=i/n runs a part, FROM=dir takes an earlier run's unperturbed runs, BATCH=10 runs per test process, EXPLORE_JOBS=1, REPORT_DIR=dir).
	KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) $(ENSEMBLE) explore -make -suite "$(or $(SUITE),./scenarios)" -focus "$$FOCUS" -j $(EXPLORE_JOBS) -timeout $(SUITE_TIMEOUT) \
	  $(if $(MODES),-modes "$$MODES") $(if $(BUDGET),-budget "$(BUDGET)") $(if $(POINTS),-points "$$POINTS") \
	  $(if $(REPEAT),-repeat "$(REPEAT)") $(if $(BATCH),-batch "$(BATCH)") $(if $(LAG),-lag "$(LAG)") $(if $(UNTIL),-until "$$UNTIL") $(if $(SHARD),-shard "$(SHARD)") $(if $(FROM),-from $(abspath $(FROM))) $(if $(PRUNE),-prune=$(PRUNE)) \
	  $(if $(REPORT_DIR),-report-dir $(abspath $(REPORT_DIR)))

EXPLORE_MERGE_NEEDS = make explore-merge: pass MERGE='<shard dir>/explore.json ...', every shard's, and REPORT_DIR=<dir> for the joined explore.json
.PHONY: explore-merge
explore-merge: $(ENSEMBLE) ## Join the explore.json of every shard of one make explore run (MERGE='a/explore.json b/explore.json', REPORT_DIR=dir) into one table and explore.json.
	$(if $(MERGE),,$(error $(EXPLORE_MERGE_NEEDS)))$(if $(REPORT_DIR),,$(error $(EXPLORE_MERGE_NEEDS)))
	$(ENSEMBLE) explore -merge "$$MERGE" -report-dir $(abspath $(REPORT_DIR))

# mutate: the scenario suite's mutation score over one reference operator package. gremlins finds the mutants
# (a dry run); ensemble mutate runs them, since gremlins itself only runs the mutated package's own tests
# (or the whole module's). Per-spec coverage first: each spec the label filter selects runs alone with
# -coverpkg (every one must pass: the baseline). Then the covered mutants become switches of one mutant
# schema, compiled once with go test -c -overlay, and each runs only the specs whose coverage holds its
# position, many mutants a test process (a run each). MUTATE_JOBS=n runs n test processes at once (default
# twice the cores; more than the cores is fine: at most one boots per two cores at once), MAX=n an evenly
# spaced n of the covered mutants, BASE=rev only those on lines changed since rev.
GREMLINS_VERSION := v0.6.0
GREMLINS := $(BIN)/gremlins
PKG ?= operators/multigres
BASE ?=
MAX ?=
MUTATE_JOBS ?=

$(GREMLINS):
	GOBIN=$(BIN) $(GO) install github.com/go-gremlins/gremlins/cmd/gremlins@$(GREMLINS_VERSION)

.PHONY: mutate
mutate: envtest-assets $(GREMLINS) $(ENSEMBLE) ## The scenario suite's mutation score over PKG (default operators/multigres), each mutant judged by the specs that cover it: killed, survived, not covered per file, the survivors, times (BASE=rev, MAX=n, LABELS=filter, MUTATE_JOBS=twice the cores).
	KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) $(ENSEMBLE) mutate -gremlins $(GREMLINS) -suite ./scenarios -pkg $(PKG) $(if $(MUTATE_JOBS),-j $(MUTATE_JOBS)) \
	  $(if $(BASE),-base $(BASE)) $(if $(MAX),-max $(MAX)) $(if $(LABELS),-labels "$(LABELS)")
