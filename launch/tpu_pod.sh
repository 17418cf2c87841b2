#!/usr/bin/env bash
# Runs one socialrm command on every host of a Cloud TPU pod slice: one process per host, each on
# its own chips.
#
#   TPU_NAME=my-v4-32 ZONE=us-central2-b launch/tpu_pod.sh COMMAND [FLAGS...]
#   TPU_NAME=my-v4-32 ZONE=us-central2-b launch/tpu_pod.sh score \
#       --model=/mnt/shared/rm --items=/mnt/shared/converted --output_dir=/mnt/shared/scores
#
# COMMAND is one of audit, score, train, ablation, probe, vocab_scan (socialrm_jax.main.COMMAND).
# Every host needs this repository installed at REPO_DIR (default ~/socialrm_jax, `pip install -e .`
# with jax[tpu]) and must see the model, the data and the output folder at the same paths (a
# shared filesystem: NFS / Filestore). `--distributed` makes each process call
# `jax.distributed.initialize()`, which finds the pod from the TPU metadata. What each process
# reads and writes, and how to resume (rerun the same command): docs/multihost.md.
set -euo pipefail
COMMANDS="audit score train ablation probe vocab_scan"
command=${1:-}
if [[ " $COMMANDS " != *" $command "* ]]; then
  echo "tpu_pod.sh: error: the first argument is the command to run, one of: $COMMANDS" >&2
  exit 2
fi
shift
: "${TPU_NAME:?set TPU_NAME to the TPU VM name}"
: "${ZONE:?set ZONE to the TPU zone}"
REPO_DIR=${REPO_DIR:-'~/socialrm_jax'}
PYTHON=${PYTHON:-python3}
args=$(printf '%q ' "$@")
gcloud compute tpus tpu-vm ssh "$TPU_NAME" --zone="$ZONE" --worker=all \
  --command="cd $REPO_DIR && $PYTHON -m socialrm_jax.main.$command --distributed $args"
