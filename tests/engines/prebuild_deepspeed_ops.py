"""Compile DeepSpeed's CPU ops once, into the directory the engine tests load them from.

DeepSpeed JIT-compiles its CPU FusedAdam and shared-memory comm ops on their first use (1-2 min of g++ on
2 cores, docs/engines.md). In a fresh clone the first DeepSpeed test on each xdist worker waited on that
compiler (88 s each in CI); `make engines` runs this instead, while the other venvs install. The environment
is the engine tests' (tests/engines/conftest.py): another TORCH_EXTENSIONS_DIR or accelerator would build
ops no test loads.

    DS_ACCELERATOR=cpu TORCH_EXTENSIONS_DIR=.workbench/torch_extensions python tests/engines/prebuild_deepspeed_ops.py
"""

from __future__ import annotations

import os
import sys
import time

# the ops DeepSpeed's CPU accelerator builds for the learner: AdamW's kernel and the comm backend
OPS = ("FusedAdamBuilder", "ShareMemCommBuilder")


def main() -> int:
    if os.environ.get("DS_ACCELERATOR") != "cpu" or not os.environ.get("TORCH_EXTENSIONS_DIR"):
        print("set DS_ACCELERATOR=cpu and TORCH_EXTENSIONS_DIR as tests/engines/conftest.py does", file=sys.stderr)
        return 2
    from deepspeed.accelerator import get_accelerator

    for name in OPS:
        started = time.perf_counter()
        get_accelerator().create_op_builder(name).load(verbose=False)
        print(f"DeepSpeed op {name}: ready in {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
