#!/usr/bin/env bash
# browser.sh finds the Chrome or Chromium that the timeline's browser test (suite/timeline_test.go) opens, or
# installs Debian's chromium with apt-get when there is none, and prints the browser's path.
#
# Usage: tools/browser/browser.sh          find one, else install Debian's chromium; print its path
#        tools/browser/browser.sh --find   find one only; print its path, or exit 1 printing nothing
#
# The lookup takes CHROME when it is set (a path, or a name looked up on PATH; one that is not an executable is
# an error), then the names and paths that chromedp's own lookup tries on Linux (findExecPath in chromedp's
# allocate.go), in its order; browser_test.go checks that the list below is chromedp's. The install runs
# apt-get update and apt-get install chromium, non-interactively, through sudo when not root, waiting for dpkg's
# lock when another apt-get holds it. When it cannot,
# the script exits 1 with one line that says what to do. BROWSER_ROOT, for the script's test only, is a
# directory put before the absolute paths of the list.
set -euo pipefail

locations=(headless_shell headless-shell chromium chromium-browser google-chrome google-chrome-stable
  google-chrome-beta google-chrome-unstable /usr/bin/google-chrome /usr/local/bin/chrome /snap/bin/chromium chrome)
root="${BROWSER_ROOT:-}"
how="install Chrome or Chromium (on Debian: sudo apt-get install chromium), or set CHROME to one"

fail() {
  echo "tools/browser/browser.sh: $*" >&2
  exit 1
}

# executable NAME prints the path of NAME as exec.LookPath finds it: a name with a slash is taken as it is, one
# without is looked up on PATH. It is false when that is not an executable file.
executable() {
  if [[ "$1" == */* ]]; then
    [[ -f "$1" && -x "$1" ]] && echo "$1"
  else
    type -P "$1"
  fi
}

# lookup prints the path of the first browser found, or is false.
lookup() {
  if [[ -n "${CHROME:-}" ]]; then
    executable "$CHROME" || fail "CHROME=$CHROME is not an executable: set CHROME to a Chrome or Chromium binary, or unset it to look for one"
    return
  fi
  local l
  for l in "${locations[@]}"; do
    [[ "$l" == /* ]] && l="$root$l"
    executable "$l" && return
  done
  return 1
}

if lookup; then
  exit 0
fi
[[ "${1:-}" == "--find" ]] && exit 1

command -v apt-get >/dev/null || fail "no Chrome or Chromium found, and no apt-get to install Debian's chromium: $how"
sudo=""
if [[ "$(id -u)" != 0 ]]; then
  command -v sudo >/dev/null || fail "no Chrome or Chromium found, and no sudo to run apt-get as root: $how"
  sudo=sudo
fi
echo "tools/browser/browser.sh: no Chrome or Chromium found: installing Debian's chromium (apt-get install chromium)" >&2
# apt-get update does not wait for another apt-get that holds the package lists' lock (a runner's unattended
# upgrades at boot, or a second make test installing at the same time); those lists are being refreshed then, so
# its failure only warns, and the install says whether the package could be found.
$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null ||
  echo "tools/browser/browser.sh: apt-get update failed (above); installing from the package lists there are" >&2
# The install waits up to 10 minutes for dpkg's lock held by another apt-get or dpkg.
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=600 chromium >/dev/null ||
  fail "apt-get install chromium failed (above): $how"
hash -r
lookup || fail "apt-get installed chromium, but no name chromedp looks for finds it: set CHROME to it"
