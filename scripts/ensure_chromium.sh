#!/usr/bin/env bash
# Make sure Debian's chromium is at /usr/bin/chromium for the console's browser tests
# (tests/server/console/test_console_browser.py, Playwright driving it headless). `make test` runs
# this every time until it is there; without it those tests skip, saying why. Never
# `playwright install`: that downloads a browser build of its own.
set -u
browser="${FLOWCTL_CHROMIUM:-/usr/bin/chromium}"  # (the tests of this script point it elsewhere)
[ -x "$browser" ] && exit 0
log="${TMPDIR:-/tmp}/flowctl-chromium-install.log"
if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
  why="not root"; command -v apt-get >/dev/null 2>&1 || why="no apt-get on this machine"
  echo "note: $browser is missing and was not installed ($why); the console's browser tests will be skipped"
  exit 0
fi
echo "installing Debian's chromium (for the console's browser tests)"
if DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >"$log" 2>&1 \
   || { apt-get update -qq >>"$log" 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >>"$log" 2>&1; }; then
  exit 0
fi
reason=$(grep -E '^(E|W|Err):' "$log" | tail -n 1)
[ -n "$reason" ] || reason=$(tail -n 1 "$log")
echo "warning: could not install chromium: ${reason:-apt-get failed with no output}"
echo "         full apt-get output: $log; the console's browser tests will be skipped."
exit 0
