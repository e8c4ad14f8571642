#!/usr/bin/env bash
# Chat templates: quill's C renderer against jinja2 for every family (tests/template_ref.py).
set -u
PY=${PYTHON:-/usr/bin/python3}
"$PY" -c 'import jinja2' 2>/dev/null || { echo "FAIL python3-jinja2 is not installed (.ci/run installs it)"; exit 1; }
exec "$PY" tests/template_ref.py "${BUILD:-build}" "${SHARED:-../shared}"
