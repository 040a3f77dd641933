#!/usr/bin/env bash
# System packages the tests use beyond Python: headless Chromium for tests/test_report_browser.py.
# Idempotent (does nothing when Chromium is present), quiet, and tolerant: without apt-get, or when
# the install fails (no network, no root), it says so and exits 0: the browser test then skips with
# its reason instead of CI failing here.
set -u
for exe in chromium chromium-browser google-chrome; do
  if command -v "$exe" >/dev/null 2>&1; then
    exit 0
  fi
done
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-system: no apt-get here; install Chromium yourself to run the browser test" >&2
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO="sudo -n"
  else
    echo "install-system: not root and no passwordless sudo; Chromium not installed" >&2
    exit 0
  fi
fi
export DEBIAN_FRONTEND=noninteractive
if $SUDO apt-get update -qq >/dev/null 2>&1 \
   && $SUDO apt-get install -y -qq chromium >/dev/null 2>&1; then
  echo "install-system: installed $(chromium --version 2>/dev/null || echo chromium)"
else
  echo "install-system: apt-get could not install chromium; the browser test will skip" >&2
fi
exit 0
