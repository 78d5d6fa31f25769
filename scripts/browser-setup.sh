#!/usr/bin/env bash
# Install what the browser tests need: Debian's Chromium (Playwright's own browser download is not
# used; the tests launch /usr/bin/chromium). Best effort: without root or apt it says why and stops,
# and the browser tests then skip with that reason.
set -euo pipefail
if [ -x "${CHROMIUM:-/usr/bin/chromium}" ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "browser tests will be skipped: no Chromium at /usr/bin/chromium (install Debian's 'chromium' package)" >&2
  exit 0
fi
echo "Installing Debian's chromium for the browser tests..."
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
