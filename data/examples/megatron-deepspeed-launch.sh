#!/bin/bash
# A Megatron-DeepSpeed GPT pretraining launch on 2 nodes of 8 GPUs, written the way its example scripts
# are: settings in shell variables, the deepspeed launcher, pretrain_gpt.py's arguments, and the DeepSpeed
# config beside it (deepspeed-config.json). Import it with:
#   colo-plan import --format deepspeed --launch data/examples/megatron-deepspeed-launch.sh --cluster dgx-a100-80gb-x16
NNODES=2
GPUS_PER_NODE=8
TP=2
PP=2
DP=$(( NNODES * GPUS_PER_NODE / (TP * PP) ))
MICRO_BATCH=1
GRAD_ACC=16
GLOBAL_BATCH=$(( MICRO_BATCH * GRAD_ACC * DP ))
SEQ=${SEQ_LEN:-2048}

deepspeed --num_nodes $NNODES --num_gpus $GPUS_PER_NODE pretrain_gpt.py \
    --tensor-model-parallel-size $TP \
    --pipeline-model-parallel-size $PP \
    --num-layers 24 \
    --hidden-size 2048 \
    --num-attention-heads 16 \
    --seq-length $SEQ \
    --max-position-embeddings $SEQ \
    --vocab-size 50304 \
    --micro-batch-size $MICRO_BATCH \
    --global-batch-size $GLOBAL_BATCH \
    --bf16 \
    --deepspeed \
    --deepspeed_config deepspeed-config.json \
    --zero-stage 1
