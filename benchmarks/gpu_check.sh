#!/usr/bin/env bash
# GPU-CHECKLIST.md steps 2-4 in one call on a lent GPU machine (the device tool), ~7 minutes:
#   run(command="bash benchmarks/gpu_check.sh", carry=[".whl", ".gpucache"], timeout_s=540)
# Prepared on the CPU machine by benchmarks/gpu_prepare.sh: .whl/ (wheels the image lacks) and .gpucache/
# (the tiny models' cold starts, WORKBENCH_CACHE), so no SFT runs on the GPU's clock.
# Every part has its own time limit and log under $OUT (or ./gpu-out), so one failure costs only itself.
# Phase 1 (concurrent, timings not reported): the CUDA suite and the precision study.
# Phase 2 (alone on the machine, timings reported): bench_vs_trl tiny and 0.5B, bench_sanity.
# PARTS (default: all) picks some: pytest precision vs_trl_tiny vs_trl_q05 sanity, e.g.
#   PARTS="pytest vs_trl_q05" bash benchmarks/gpu_check.sh
set -u
PARTS=${PARTS:-pytest precision vs_trl_tiny vs_trl_q05 sanity}
want() { [[ " $PARTS " == *" $1 "* ]]; }
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false MLFLOW_ENABLE_ASYNC_LOGGING=false
T0=$(date +%s); stamp() { echo "[$(( $(date +%s) - T0 )) s] $*"; }

stamp "install carried wheels"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
  > /tmp/install.log 2>&1 || { tail -20 /tmp/install.log; exit 1; }
export PYTHONPATH=$PWD:/tmp/site
export WORKBENCH_CACHE=$PWD/.gpucache
WB="python3 -m workbench.cli.main"

{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c "import torch, transformers, mlflow, optuna, trl; print('torch', torch.__version__, 'cuda', torch.version.cuda,
'| transformers', transformers.__version__, '| mlflow', mlflow.__version__, '| optuna', optuna.__version__,
'| trl', trl.__version__, '|', torch.cuda.get_device_name(0))"
  nproc; free -g | head -2; } 2>&1 | tee "$OUT/env.log"

# ---- phase 1: suite on CUDA || precision study
stamp "phase 1: pytest on CUDA, precision study"
GPU_TESTS="tests/test_cuda.py tests/test_sampler_learner.py tests/test_lean_learner.py tests/test_lean_decode.py
 tests/test_kv_cache.py tests/test_grad_accumulation.py tests/test_mismatch_metrics.py tests/test_step0_gate.py
 tests/test_e2e_run.py tests/test_e2e_algorithms.py tests/test_train_path.py tests/test_model.py
 tests/test_overlap_scoring.py tests/algorithms tests/chat"
want pytest && ( timeout 150 python3 -m pytest -p no:cacheprovider -n 10 --timeout 120 -v -rfEs $GPU_TESTS \
    > "$OUT/pytest.log" 2>&1; echo "pytest exit $?" >> "$OUT/pytest.log" ) &
PYTEST=$!; want pytest || PYTEST=
STUDY=(studies/precision_mismatch.yaml --only seed=0 --set rollout.steps=30 --set rollout.eval_every=30
       --set learner.device=cuda)  # the task stays the study's: it keys the carried cold start
want precision && ( MLFLOW_TRACKING_URI=sqlite:///$OUT/precision.db timeout 150 $WB run "${STUDY[@]}" --parallel 5 \
    > "$OUT/precision.log" 2>&1; echo "run exit $?" >> "$OUT/precision.log"
  timeout 30 python3 - "$OUT/precision.db" >> "$OUT/precision.log" 2>&1 <<'PY'
import sys
from mlflow import MlflowClient
client = MlflowClient(f"sqlite:///{sys.argv[1]}")
names = ["mismatch/kl", "mismatch/prob_abs_diff_mean", "mismatch/prob_abs_diff_max", "mismatch/token_mult_prob_error",
         "mismatch/is_ratio_tail_frac", "mismatch/ess", "mismatch/chi2_token", "eval/accuracy"]
print("sampler dtype | correction | status | " + " | ".join(n.split("/")[1] for n in names) + "  (last step; median over steps for mismatch/kl)")
for exp in client.search_experiments():
    for run in client.search_runs([exp.experiment_id], max_results=100):
        p = run.data.params
        if "sampler.dtype" not in p:
            continue
        kl = sorted(m.value for m in client.get_metric_history(run.info.run_id, "mismatch/kl"))
        cells = [f"{run.data.metrics.get(n, float('nan')):.3g}" for n in names]
        print(f"{p['sampler.dtype']} | {p.get('algorithm.correction')} | {run.info.status} | " + " | ".join(cells)
              + f"  (median kl {kl[len(kl) // 2] if kl else float('nan'):.3g} over {len(kl)} steps)")
PY
) &
STUDY_PID=$!; want precision || STUDY_PID=
wait $PYTEST $STUDY_PID
stamp "phase 1 done"

# ---- phase 2: speed, one thing at a time
stamp "bench_vs_trl tiny, cuda"
want vs_trl_tiny && { timeout 100 python3 benchmarks/bench_vs_trl.py --device cuda --pairs 1 --steps 5 --threads 4 --trl-python python3 \
  --dir /tmp/bench-tiny --sides workbench,trl > "$OUT/vs_trl_tiny.log" 2>&1; echo "exit $?" >> "$OUT/vs_trl_tiny.log"; }
stamp "bench_vs_trl qwen2-0.5b, cuda"
want vs_trl_q05 && { timeout ${Q05_TIMEOUT:-170} python3 benchmarks/bench_vs_trl.py --device cuda --model qwen2-0.5b --prompts 8 --max-new-tokens 128 \
  --pairs ${Q05_PAIRS:-1} --steps 3 --threads 4 --trl-python python3 --dir /tmp/bench-q05 --sides workbench,trl \
  > "$OUT/vs_trl_q05.log" 2>&1; echo "exit $?" >> "$OUT/vs_trl_q05.log"; }
stamp "bench_sanity, cuda"
want sanity && { timeout 60 python3 benchmarks/bench_sanity.py --steps 10 --set learner.device=cuda \
  > "$OUT/sanity.log" 2>&1; echo "exit $?" >> "$OUT/sanity.log"; }
stamp "done"

# ---- what comes back in output_tail
echo "===== pytest"; grep -E "PASSED|FAILED|ERROR|SKIPPED" "$OUT/pytest.log" | grep -oE "(PASSED|FAILED|ERROR|SKIPPED)" | sort | uniq -c
grep -E "^(FAILED|ERROR)|Error:|pytest exit|passed|failed" "$OUT/pytest.log" | tail -25
for f in $PARTS; do [ "$f" = pytest ] && continue; echo "===== $f"; tail -n 14 "$OUT/$f.log" | cut -c1-300; done
