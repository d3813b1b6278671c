# GPU image for real hardware (the `gpu` extra: vllm + deepspeed).
# (Not buildable on the CPU dev machines; kept minimal and correct.)
FROM nvidia/cuda:12.8.1-cudnn-devel-ubuntu24.04

ENV DEBIAN_FRONTEND=noninteractive PIP_NO_CACHE_DIR=1 PYTHONUNBUFFERED=1
RUN apt-get update && apt-get install -y --no-install-recommends python3 python3-venv python3-dev git build-essential \
    && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH

WORKDIR /workbench
COPY pyproject.toml README.md ./
COPY workbench ./workbench
# vllm brings its own CUDA torch; the gpu extra adds deepspeed.
RUN pip install --upgrade pip && pip install -e '.[gpu,ray]'
COPY studies ./studies
COPY dashboards ./dashboards

# Mount a local HF model and point the study at it, e.g.
#   docker run --gpus all -v /models:/models -v $PWD/runs:/runs -w /runs IMAGE \
#     workbench run /workbench/studies/sanity.yaml --set model.path=/models/Qwen2.5-0.5B --set model.builtin=null
ENTRYPOINT ["workbench"]
# The real engines: vLLM samples (weights synced in place after every update), DeepSpeed learns.
# Several GPUs: see docs/engines.md for the `deepspeed` launcher command.
CMD ["run", "/workbench/studies/sanity.yaml", "--set", "sampler.backend=vllm", "--set", "learner.backend=deepspeed"]
