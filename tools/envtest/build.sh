#!/usr/bin/env bash
# build.sh builds kube-apiserver, kube-controller-manager and etcd from their Go modules into setup-envtest's
# layout, so envtest runs on a machine that cannot download release binaries (setup-envtest would download them).
#
# Usage: tools/envtest/build.sh            build what is missing, print the assets directory last
#        tools/envtest/build.sh --dir      print the assets directory only
#
# KUBEBUILDER_ASSETS, when set, wins: the binaries there are checked, never built.
# A binary's build is skipped when it exists and answers --version with the expected version.
set -euo pipefail

KUBE_VERSION=1.37.2
ETCD_VERSION=3.6.16
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
data_home="${XDG_DATA_HOME:-$HOME/.local/share}"
default_dir="$data_home/kubebuilder-envtest/k8s/${KUBE_VERSION}-linux-amd64"
dir="${KUBEBUILDER_ASSETS:-$default_dir}"
# Tests run in their package's directory: a relative KUBEBUILDER_ASSETS must become absolute.
dir="$(realpath -m "$dir")"

if [[ "${1:-}" == "--dir" ]]; then
  echo "$dir"
  exit 0
fi

# answers BINARY LINE is true when BINARY's --version output has LINE as one of its lines. A binary that does
# not answer within 10 s is not the right one (never hang here). The output is captured whole before it is
# compared: piping it into `grep -q` under pipefail failed at random, because grep exits at its first match
# and the binary, still writing, dies of SIGPIPE.
answers() {
  local out
  [[ -x "$1" ]] || return 1
  out="$(timeout 10 "$1" --version 2>/dev/null)" || return 1
  [[ $'\n'"$out"$'\n' == *$'\n'"$2"$'\n'* ]]
}
kube_ok() { answers "$dir/kube-apiserver" "Kubernetes v${KUBE_VERSION}"; }
kcm_ok() { answers "$dir/kube-controller-manager" "Kubernetes v${KUBE_VERSION}"; }
etcd_ok() { answers "$dir/etcd" "etcd Version: ${ETCD_VERSION}"; }

if kube_ok && kcm_ok && etcd_ok; then
  echo "envtest binaries present at $dir (kube-apiserver v${KUBE_VERSION}, kube-controller-manager v${KUBE_VERSION}, etcd v${ETCD_VERSION}); nothing to build" >&2
  echo "$dir"
  exit 0
fi
if [[ -n "${KUBEBUILDER_ASSETS:-}" ]]; then
  echo "KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS does not hold kube-apiserver v${KUBE_VERSION}, kube-controller-manager v${KUBE_VERSION} and etcd v${ETCD_VERSION}: point it at a directory that does, or unset it and the binaries are built into $default_dir" >&2
  exit 1
fi

mkdir -p "$dir"
start=$(date +%s)
# Each go build runs in the background while the script waits for it, so a SIGTERM (make passes it on to its
# recipe) or a SIGINT reaches the script at once. The script then interrupts go as Ctrl-C does: go stops its
# compilers and removes its work directory (a go killed outright leaves it in the temp dir, 2 GB here, and
# runs on after make has gone), and the script removes the unfinished binary before it exits.
child="" partial=""
interrupted() {
  if [[ -n "$child" ]]; then
    kill -INT "$child" 2>/dev/null || true
    wait "$child" 2>/dev/null || true
  fi
  [[ -z "$partial" ]] || rm -f "$partial"
  echo "tools/envtest/build.sh: interrupted; the build stopped and left nothing half-built: run make envtest-assets again" >&2
  exit "$1"
}
trap 'interrupted 143' TERM
trap 'interrupted 130' INT
# build OUT DIR PACKAGE [FLAG ...] builds PACKAGE of the module in DIR into OUT.
build() {
  local out="$1" mod="$2" pkg="$3"
  shift 3
  partial="$out.tmp"
  go -C "$mod" build -trimpath -o "$partial" "$@" "$pkg" &
  child=$!
  local rc=0
  wait "$child" || rc=$?
  child=""
  [[ $rc -eq 0 ]] || { rm -f "$partial"; partial=""; return "$rc"; }
  mv "$partial" "$out"
  partial=""
}
# build_kube NAME builds k8s.io/kubernetes/cmd/NAME into $dir/NAME, its version stamped as a release's is.
build_kube() {
  build "$dir/$1" "$here" "k8s.io/kubernetes/cmd/$1" \
    -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=v${KUBE_VERSION} -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37"
}
if ! kube_ok; then
  echo "building kube-apiserver v${KUBE_VERSION} from k8s.io/kubernetes (about 5 minutes on 2 cores)..." >&2
  build_kube kube-apiserver
fi
if ! kcm_ok; then
  echo "building kube-controller-manager v${KUBE_VERSION} from k8s.io/kubernetes (about 9 minutes on 2 cores, 4 when kube-apiserver has just been built)..." >&2
  build_kube kube-controller-manager
fi
if ! etcd_ok; then
  echo "building etcd v${ETCD_VERSION} from go.etcd.io/etcd/server/v3..." >&2
  build "$dir/etcd" "$here/etcd" go.etcd.io/etcd/server/v3 -ldflags "-s -w"
fi
kube_ok || { echo "built kube-apiserver does not answer v${KUBE_VERSION} to --version" >&2; exit 1; }
kcm_ok || { echo "built kube-controller-manager does not answer v${KUBE_VERSION} to --version" >&2; exit 1; }
etcd_ok || { echo "built etcd does not answer ${ETCD_VERSION} to --version" >&2; exit 1; }
echo "envtest binaries built in $(( $(date +%s) - start ))s at $dir" >&2
echo "$dir"
