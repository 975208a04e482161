#!/usr/bin/env bash
# Render a searchveil HTML report with headless Chromium and save a PNG screenshot, to check the
# report as a person would see it (plots visible, tables readable).
#
# Usage:  scripts/screenshot_report.sh REPORT.html [OUT.png] [WIDTHxHEIGHT]
#   defaults: OUT.png = REPORT.png beside the report, size 1280x2400.
# Needs the Debian package `chromium` (apt-get install -y chromium). For the layout checks of
# tests/test_reports_browser.py (sideways scrolling, images, console errors) on one report, and a
# screenshot of the whole page: python tests/_browser.py REPORT.html --png OUT.png The report is self-contained, and Chromium runs with networking features off
# (no background networking, no component updates, no sync, no QUIC), in a throw-away profile.
set -euo pipefail

if [[ $# -lt 1 || $# -gt 3 ]]; then
    echo "usage: $0 REPORT.html [OUT.png] [WIDTHxHEIGHT]" >&2
    exit 2
fi
report="$1"
if [[ ! -f "$report" ]]; then
    echo "error: report not found: $report" >&2
    exit 2
fi
out="${2:-${report%.*}.png}"
size="${3:-1280x2400}"
if [[ ! "$size" =~ ^[0-9]+x[0-9]+$ ]]; then
    echo "error: size must look like 1280x2400, got: $size" >&2
    exit 2
fi
browser="$(command -v chromium || command -v chromium-browser || true)"
if [[ -z "$browser" ]]; then
    echo "error: chromium not found (Debian: apt-get install -y chromium)" >&2
    exit 2
fi
abs_report="$(cd "$(dirname "$report")" && pwd)/$(basename "$report")"
abs_out="$(cd "$(dirname "$out")" && pwd)/$(basename "$out")"
profile="$(mktemp -d)"
trap 'rm -rf "$profile"' EXIT

"$browser" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --hide-scrollbars --user-data-dir="$profile" \
    --screenshot="$abs_out" --window-size="${size/x/,}" "file://$abs_report" \
    >/dev/null 2>&1

if [[ ! -s "$abs_out" ]]; then
    echo "error: chromium wrote no screenshot" >&2
    exit 1
fi
echo "$abs_out"
