#!/usr/bin/env bash
# Scores on every host of a Cloud TPU pod slice: one process per host, each on its own chips.
#
#   TPU_NAME=my-v4-32 ZONE=us-central2-b launch/tpu_pod.sh \
#       --model=/mnt/shared/rm --items=/mnt/shared/converted --output_dir=/mnt/shared/scores
#
# Every host needs this repository installed at REPO_DIR (default ~/socialrm_jax, `pip install -e .`
# with jax[tpu]) and must see the model, the items and the output folder at the same paths (a
# shared filesystem: NFS / Filestore). `--distributed` makes each process call
# `jax.distributed.initialize()`, which finds the pod from the TPU metadata; each host then scores
# its own contiguous slice of the items into its own shards. Rerun the same command to resume.
set -euo pipefail
: "${TPU_NAME:?set TPU_NAME to the TPU VM name}"
: "${ZONE:?set ZONE to the TPU zone}"
REPO_DIR=${REPO_DIR:-'~/socialrm_jax'}
PYTHON=${PYTHON:-python3}
args=$(printf '%q ' "$@")
gcloud compute tpus tpu-vm ssh "$TPU_NAME" --zone="$ZONE" --worker=all \
  --command="cd $REPO_DIR && $PYTHON -m socialrm_jax.main.score --distributed $args"
