#!/usr/bin/env bash
# The test command of the README: set up (first time only), then the whole suite.
# Extra arguments go to pytest, e.g. tools/run_tests.sh -k shard -x
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck disable=SC1091
. ./path.sh
exec python -m pytest -q "$@"
