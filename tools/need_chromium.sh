#!/bin/sh
# `make test`'s first step. The browser tests (tests/analysis/test_report_html.py) open report.html in
# headless chromium. Found on PATH: nothing to do. Missing, on a Debian-like system where this
# user is root or has sudo without a password: installed with apt-get (Debian's `chromium`).
# Otherwise one line says what to run, and make test stops (exit 2) before installing or running
# anything else.
set -eu
found() { command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; }
found && exit 0
if command -v apt-get >/dev/null 2>&1; then
  if [ "$(id -u)" -eq 0 ]; then
    as_root=""
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    as_root="sudo -n"
  else
    as_root="none"
  fi
  if [ "$as_root" != "none" ]; then
    echo "make test: installing chromium with apt-get, for the browser tests" >&2
    $as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q
    $as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium
    found && exit 0
    echo "make test: apt-get installed chromium, but no chromium is on PATH" >&2
    exit 2
  fi
fi
echo "make test: chromium is missing (tests/analysis/test_report_html.py opens report.html in it):" \
  "run 'sudo apt-get install -y chromium' (Debian, Ubuntu; or your system's package manager)," \
  "then 'make test' again" >&2
exit 2
