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
# Prometheus and promtool for the metrics lane (gateway/tests/gateway/prometheus.rs).
command -v promtool >/dev/null 2>&1 || need_pkgs+=(prometheus)
# A real OCI registry on loopback and htpasswd for its auth instance
# (flashload/tests/flashload/oci_registry.rs, operator/tests/operator/model_catalog.rs).
[ -x /usr/bin/docker-registry ] || need_pkgs+=(docker-registry)
command -v htpasswd >/dev/null 2>&1 || need_pkgs+=(apache2-utils)
# nginx in front of the gateway, cutting idle connections as load balancers do
# (gateway/tests/gateway/held_streams.rs).
[ -x /usr/sbin/nginx ] || need_pkgs+=(nginx-light)
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

# Offline rendering and validation of the Helm chart
# (docs/gen/tests/docs/helm_chart.rs runs helm/tests/check_chart.py): Helm's Go SDK
# as a Python library, the Kubernetes OpenAPI schemas, JSON Schema for our CRDs.
helm_pkgs=('helm-python-sdk==0.2.2' 'kubernetes-validate==1.37.0' 'jsonschema==4.26.0' 'PyYAML==6.0.4')
if ! .venv/bin/python - "${helm_pkgs[@]}" >/dev/null 2>&1 <<'PY'
import sys
from importlib.metadata import version
sys.exit(any(version(name) != want for name, want in (p.split("==") for p in sys.argv[1:])))
PY
then
  echo "setup: installing the Helm chart test packages into .venv"
  .venv/bin/pip install --quiet --disable-pip-version-check "${helm_pkgs[@]}"
fi

# Anthropic's Python SDK, driven through the gateway's /v1/messages
# (gateway/tests/gateway/openai_sdk.rs).
sdk_pkgs=('anthropic==2.10.0')
if ! .venv/bin/python - "${sdk_pkgs[@]}" >/dev/null 2>&1 <<'PY'
import sys
from importlib.metadata import version
sys.exit(any(version(name) != want for name, want in (p.split("==") for p in sys.argv[1:])))
PY
then
  echo "setup: installing the Anthropic SDK into .venv"
  .venv/bin/pip install --quiet --disable-pip-version-check "${sdk_pkgs[@]}"
fi

# Artifacts pushed to the loopback registry with ORAS's Python client
# (the OCI pull and ModelCatalog tests).
oci_pkgs=('oras==0.2.25')
if ! .venv/bin/python - "${oci_pkgs[@]}" >/dev/null 2>&1 <<'PY'
import sys
from importlib.metadata import version
sys.exit(any(version(name) != want for name, want in (p.split("==") for p in sys.argv[1:])))
PY
then
  echo "setup: installing the OCI test packages into .venv"
  .venv/bin/pip install --quiet --disable-pip-version-check "${oci_pkgs[@]}"
fi
