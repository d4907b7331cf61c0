#!/usr/bin/env bash
# Make sure Graphviz's `dot` is on PATH (SVG/PNG graphs need it; DOT and mermaid output do not).
# `make install` runs this every time until `dot` is found, so a failed install is tried again.
# On failure it says why (apt-get's own last error line) and where the full output is.
set -u
command -v dot >/dev/null 2>&1 && exit 0
log="${TMPDIR:-/tmp}/flowctl-graphviz-install.log"
if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
  why="not root"; command -v apt-get >/dev/null 2>&1 || why="no apt-get on this machine"
  echo "note: 'dot' is missing and was not installed ($why); install Graphviz yourself" \
       "(e.g. sudo apt-get install graphviz, brew install graphviz) for SVG/PNG graphs"
  exit 0
fi
echo "installing Debian's graphviz (for SVG/PNG graphs)"
if apt-get install -y -qq graphviz >"$log" 2>&1 \
   || { apt-get update -qq >>"$log" 2>&1 && apt-get install -y -qq graphviz >>"$log" 2>&1; }; then
  exit 0
fi
reason=$(grep -E '^(E|W|Err):' "$log" | tail -n 1)
[ -n "$reason" ] || reason=$(tail -n 1 "$log")
echo "warning: could not install graphviz: ${reason:-apt-get failed with no output}"
echo "         full apt-get output: $log; 'make install' will try again next time."
echo "         SVG/PNG graphs need 'dot'; DOT and mermaid output still work."
exit 0
