#!/usr/bin/env bash
# Everything benchmarks/gpu_check.sh carries to a lent GPU machine (GPU-CHECKLIST.md step 1):
# the wheels its image lacks (.whl/) and the tiny models' cold starts (.gpucache/), so that no SFT
# runs on the GPU's clock. Run on a machine with PyPI, after `make install`:
#   benchmarks/gpu_prepare.sh
#
# The device image (Python 3.12, torch 2.11+cu130, transformers 5.17, the scientific stack; no
# internet) has neither MLflow, Optuna, math-verify, pydantic nor plotly, nor TRL for the peer bench.
# This downloads the closure of what the workbench needs, minus what the image already holds
# (IMAGE_PACKAGES below, from /work/.library/device/KINDS.md, 2026-11-17) and minus CUDA libraries,
# into .whl/ (ignored; ~32 MiB, carried with the working tree). Then on the machine:
#   python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
#   export PYTHONPATH=$PWD:/tmp/site
# mlflow-skinny (4 MB) stands in for mlflow (its server's UI is not needed there); sqlalchemy and
# alembic give it the SQLite store.
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=${DEST:-.whl}
ALL=$(mktemp -d)
PLATFORMS=""
for n in 1 2014 2_17 2_24 2_27 2_28 2_31 2_34; do
  case $n in 1|2014) PLATFORMS+=" --platform manylinux${n}_x86_64";; *) PLATFORMS+=" --platform manylinux_${n}_x86_64";; esac
done
python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp $PLATFORMS -d "$ALL" \
  'mlflow-skinny>=3.17,<4' 'optuna>=5.0,<6' 'math-verify[antlr4_13_2]>=0.9,<0.10' 'pydantic>=2.10,<3' \
  'plotly>=6,<8' 'trl>=1.16,<1.17' 'datasets>=5,<6' sqlalchemy alembic
IMAGE_PACKAGES="absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch
build certifi charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core
cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock
flatbuffers flax fonttools formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx
huggingface-hub humanize hypothesis idna imageio iniconfig interface-meta jax jaxlib jaxtyping jinja2 joblib
kiwisolver lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml markdown
markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch
mypy-extensions nanobind narwhals networkx ninja numba numba-cuda numpy numpyro onnx onnx-ir onnxruntime
onnxscript opencv-python-headless optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging pandas
pathspec patsy peft pillow pip pluggy portalocker prometheus-client propcache protobuf psutil pyarrow pybind11
py-cpuinfo pygments pyparsing pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock
pytest-timeout pytest-xdist python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors
scikit-build-core scikit-image scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools
shellingham simplejson six sortedcontainers statsmodels sympy tabulate tensorboard tensorboard-data-server
tensorstore threadpoolctl tifffile tiktoken timm tokenizers toolz torch torchaudio torchdiffeq torch-geometric
torchmetrics torchvision tqdm transformers treescope triton typer typing-extensions typing-inspect urllib3
uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl zipp"
mkdir -p "$DEST"
for wheel in "$ALL"/*.whl; do
  name=$(basename "$wheel" | cut -d- -f1 | tr 'A-Z_' 'a-z-')
  case "$name" in nvidia-*|cuda-*) continue;; esac
  if ! grep -qx "$name" <<<"$(tr ' ' '\n' <<<"$IMAGE_PACKAGES")"; then cp "$wheel" "$DEST"/; fi
done
rm -rf "$ALL"
du -sh "$DEST"; ls "$DEST" | wc -l

# The cold starts of the studies gpu_check.sh runs (the task keys them; ~3 min on 2 CPU cores).
WORKBENCH_CACHE=$PWD/.gpucache .venv/bin/python - studies/scratchpad.yaml studies/sanity.yaml <<'PY'
import sys
from workbench.models import model_dir
from workbench.study import expand, load_study
for path in sys.argv[1:]:
    cfg = expand(load_study(path))[0]
    cfg = getattr(cfg, "config", cfg)
    print(path, "->", model_dir(cfg.model, cfg.task, progress=True))
PY
du -sh .gpucache
