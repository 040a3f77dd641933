#!/usr/bin/env bash
# The CUDA paths, checked on a machine with a GPU: the gate (forward, gradient, both optimisers' update,
# the masks) and the generation gate in torch and JAX on the device, then a short measured run of the
# transformers and of generation. Each step has its own time limit and writes its output under OUT
# as it goes, so a step that fails or runs out of time loses only itself.
#
#     OUT=/tmp/gpu benchmarks/gpu_check.sh            # the whole check (about 9 minutes on an H100)
#     OUT=/tmp/gpu DEVICE=cpu QUICK=1 benchmarks/gpu_check.sh   # the same steps on the CPU, tiny
#     OUT=/tmp/gpu STEPS="run show" MODELS=bert-base,gpt2 RUN_LIMIT=480 benchmarks/gpu_check.sh
#                                       # only those steps (a measured grid of the models named; each is gated first)
#
# docs/gpu.md quotes what one run printed, with the machine it ran on.
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:?set OUT to a folder for the results}
DEVICE=${DEVICE:-cuda}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
DB="$OUT/gpu.db"
if [ -n "${QUICK:-}" ]; then TIMING=(--repeats 2 --min-time 0.1 --warmup 2 --min-iters 3); GEN=(--prompt-len 8 --new-tokens 4 --generations 2)
else TIMING=(--repeats 2 --min-time 1); GEN=(); fi
MODELS=${MODELS:-gpt2}
STEPS=" ${STEPS:-verify-torch verify-jax generate run verify-compile show} "
GATE_MODELS=${GATE_MODELS:-lenet,resnet-56,lstm-ptb,bert-base,gpt2,vit-b16,smollm2-135m}

step() {  # step NAME SECONDS COMMAND...: run one step (if STEPS names it), its output to OUT/NAME.txt and here
    local name=$1 limit=$2; shift 2
    [[ "$STEPS" == *" $name "* ]] || return 0
    echo "== $name: $*" | tee "$OUT/$name.txt"
    local t0=$SECONDS
    timeout "$limit" "$@" >>"$OUT/$name.txt" 2>&1
    local rc=$?
    tail -n 40 "$OUT/$name.txt"
    echo "== $name: exit $rc after $((SECONDS - t0)) s" | tee -a "$OUT/$name.txt"
}

{
    nvidia-smi -L 2>/dev/null || echo "no nvidia-smi"
    $PY -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available() and torch.cuda.get_device_name(0))"
    $PY -c "import jax, flax, optax; print('jax', jax.__version__, 'flax', flax.__version__, 'optax', optax.__version__, jax.devices())"
} >"$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"

step verify-torch 90 $PY -m dlbench verify --device "$DEVICE" --framework torch --precision fp32,bf16 --model "$GATE_MODELS"
step verify-jax 150 $PY -m dlbench verify --device "$DEVICE" --framework jax --precision fp32,bf16 --model "$GATE_MODELS"
step generate 80 $PY -m dlbench run --db "$DB" --device "$DEVICE" --framework torch,jax --model gpt2 --threads 2 \
    --scenario generate --precision fp32,bf16 --batch 1,4 "${TIMING[@]}" "${GEN[@]}"
step run "${RUN_LIMIT:-130}" $PY -m dlbench run --db "$DB" --device "$DEVICE" --framework torch,jax --model "$MODELS" --threads 2 \
    --scenario forward,train_step --precision fp32,bf16 --batch 8 "${TIMING[@]}"
step verify-compile 60 $PY -m dlbench verify --device "$DEVICE" --framework torch --variant compile --model gpt2
step show 20 $PY -m dlbench show --db "$DB"
