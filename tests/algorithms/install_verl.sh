#!/usr/bin/env bash
# Install verl 0.9.1 for the parity tests (tests/algorithms/test_verl_parity.py), without its
# dependencies (ray, vllm, a pinned transformers, ... conflict with ours), into TARGET_DIR,
# together with the few small packages `verl.trainer.ppo.core_algos` needs at import time
# and our environment lacks. Nothing is installed into the environment itself.
#
#   tests/algorithms/install_verl.sh .verl
#   WORKBENCH_VERL_PATH=.verl python -m pytest tests/algorithms
#
# Ray is needed only as a name at import time; the test supplies a stand-in module when
# ray is not installed. PYTHON selects the interpreter (default: the repo's .venv, else python3).
set -euo pipefail

if [[ $# -ne 1 ]]; then
    echo "usage: $0 TARGET_DIR" >&2
    exit 2
fi
target="$1"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
if [[ -z "${PYTHON:-}" ]]; then
    if [[ -x "$root/.venv/bin/python" ]]; then PYTHON="$root/.venv/bin/python"; else PYTHON=python3; fi
fi

# tensordict 0.15 is pure Python (verl pins <=0.10, whose compiled extension targets an older
# torch); core_algos only imports its TensorDict type. omegaconf 2.4 needs no antlr runtime.
"$PYTHON" -m pip install --quiet --no-deps --upgrade --target "$target" \
    "verl==0.9.1" \
    "omegaconf==2.4.0" \
    "tensordict==0.15.3" \
    "pyvers==0.2.3" \
    "codetiming==1.4.0" \
    "orjson==3.13.0"
# The verl wheel also ships top-level `tests` and `scripts` packages; on sys.path they would
# shadow this repository's `tests` package, and core_algos needs neither.
rm -rf "${target:?}/tests" "${target:?}/scripts"
echo "verl installed in $target; run the parity tests with WORKBENCH_VERL_PATH=$target"
