#!/usr/bin/env bash
# The whole check suite: formatting, lints and every test of the workspace.
# Installs what a fresh machine lacks first (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export FLEXINFER_PYTHON="$PWD/.venv/bin/python"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
cargo test --workspace --no-fail-fast
