#!/usr/bin/env bash
# Installs what building and testing FlexInfer needs on a fresh Debian machine:
# cmake (Pingora's zlib-ng build), wrk (load generator for benchmarks) and a
# Python virtual environment with the official OpenAI SDK (client-side tests).
# Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."

need_pkgs=()
command -v cmake >/dev/null 2>&1 || need_pkgs+=(cmake)
command -v python3 >/dev/null 2>&1 || need_pkgs+=(python3 python3-venv)
if [ "${#need_pkgs[@]}" -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "setup: installing ${need_pkgs[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi

if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c 'import openai' >/dev/null 2>&1; then
  echo "setup: creating .venv with the OpenAI SDK"
  python3 -m venv .venv
  .venv/bin/pip install --quiet --disable-pip-version-check 'openai>=1.40'
fi
