#!/usr/bin/env bash
# Installs SGLang Model Gateway (PyPI sglang-router, pinned), once, cached:
# the reference peer router of `flexinfer-bench routing --strategies sglang`.
#
# Prints the variable the benchmark reads, ready for `eval`:
#   SGLANG_ROUTER_PYTHON  interpreter that runs `python -m sglang_router.launch_router`
#
# Cache: $FLEXINFER_CACHE (default ~/.cache/flexinfer): sglang-venv/.
set -euo pipefail

CACHE="${FLEXINFER_CACHE:-$HOME/.cache/flexinfer}"
VENV="$CACHE/sglang-venv"
SGLANG_ROUTER_VERSION=0.3.2

log() { echo "sglang-router: $*" >&2; }

if [ ! -x "$VENV/bin/python" ]; then
  log "creating $VENV"
  python3 -m venv "$VENV"
fi

installed=$("$VENV/bin/python" -c \
  'import importlib.metadata as m; print(m.version("sglang-router"))' 2>/dev/null || true)
if [ "$installed" != "$SGLANG_ROUTER_VERSION" ]; then
  log "installing sglang-router $SGLANG_ROUTER_VERSION"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check \
    "sglang-router==$SGLANG_ROUTER_VERSION" >&2
fi

echo "export SGLANG_ROUTER_PYTHON=$VENV/bin/python"
