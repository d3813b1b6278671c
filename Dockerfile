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

# The default command runs the GPU study (docs/gpu.md): GRPO vs Dr. GRPO on GSM8K with a local chat model,
# vLLM sampling, a DeepSpeed bf16 learner. Mount the model and the data where the study expects them
# (override with --set model.path=... / task.path=... / task.eval_path=...):
#   docker run --gpus all --shm-size 8g -v /models:/models:ro -v /data:/data:ro -v $PWD/runs:/runs -w /runs IMAGE
#   /models/Qwen2.5-0.5B-Instruct    a HF model directory (config.json, weights, tokenizer with a chat template)
#   /data/gsm8k/{train,test}.jsonl   GSM8K's own lines: {"question": ..., "answer": "... #### 72"}
ENTRYPOINT ["workbench"]
CMD ["run", "/workbench/studies/qwen_gsm8k.yaml"]
