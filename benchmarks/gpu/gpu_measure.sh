#!/usr/bin/env bash
# The GPU measurements (docs/benchmarks.md, "On a GPU"), stage by stage, each under its own time
# limit so that one stage that hangs or fails leaves the others' figures. Run on a GPU machine
# from the repository root, with the wheels and data the GPU image lacks in .whl/ (see
# benchmarks/gpu/gpu_throughput.py's docstring: gguf, ml_collections, and for TRL trl, datasets,
# dill, multiprocess; the full data in .whl/data/):
#
#   bash benchmarks/gpu/gpu_measure.sh tests score1b train1b     # then: score8b vocab1b
#
# Stages: tests (tests/gpu: cuDNN against XLA), score1b / score8b (benchmarks/gpu/gpu_throughput.py
# presets, bf16), train1b (benchmarks/training/train_throughput.py --preset=1b against TRL, bf16, cuDNN),
# vocab1b (benchmarks/gpu/vocab_scan_throughput.py --scan_preset=1b). Everything a stage prints goes
# to $OUT/STAGE.txt (and the terminal); the tables are the last lines of each.
set -u
OUT=${OUT:-/tmp/gpu_measure_out}
WORK=${GPU_MEASURE_WORK:-/tmp/gpu_measure}
mkdir -p "$OUT" "$WORK"
export PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=2

if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
DATA=../shared/data
[ -d "$DATA/bbq" ] || DATA=.whl/data

stage() {  # stage NAME SECONDS COMMAND...
  local name=$1 limit=$2
  shift 2
  echo "=== $name ($(date +%H:%M:%S), limit ${limit} s): $*"
  local start=$SECONDS
  timeout --signal=TERM --kill-after=10 "$limit" "$@" 2>&1 | tee "$OUT/$name.txt"
  local code=${PIPESTATUS[0]}
  echo "=== $name: exit $code after $((SECONDS - start)) s"
}

for name in "$@"; do
  case $name in
    env)
      stage env 60 bash -c 'nvidia-smi; python3 -c "import jax, flax, torch, transformers;
print(jax.__version__, flax.__version__, torch.__version__, transformers.__version__);
print(jax.devices())"' ;;
    tests)
      stage tests 300 python3 -m pytest -q -s -rA -p no:cacheprovider tests/gpu ;;
    score1b)
      stage score1b 260 python3 -m benchmarks.gpu.gpu_throughput --preset=1b --data_dir="$DATA" \
          --work_dir="$WORK/gt" --runs=ours,torch_sorted,ours_warm ;;
    score1b_loop)
      stage score1b_loop 300 python3 -m benchmarks.gpu.gpu_throughput --preset=1b --data_dir="$DATA" \
          --work_dir="$WORK/gt" --runs=torch ;;
    score8b)
      stage score8b 330 python3 -m benchmarks.gpu.gpu_throughput --preset=8b --data_dir="$DATA" \
          --work_dir="$WORK/gt" --runs=ours,torch_sorted ;;
    train1b)
      stage train1b 300 python3 -m benchmarks.training.train_throughput --preset=1b --data_dir="$DATA" \
          --work_dir="$WORK/tt" --dtype=bfloat16 --attention=cudnn ;;
    vocab1b)
      stage vocab1b 300 python3 -m benchmarks.gpu.vocab_scan_throughput --scan_preset=1b --device=gpu \
          --scan_work_dir="$WORK/vs" ;;
    *)
      echo "unknown stage $name (env, tests, score1b, score1b_loop, score8b, train1b, vocab1b)"
      exit 2 ;;
  esac
done
