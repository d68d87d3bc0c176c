#!/bin/sh
# A sharded `etl unwind` on AWS Batch: two array jobs of SHARDS children each (the infer and
# the write phase, AWS_BATCH_JOB_ARRAY_INDEX -> --shard), then one commit job. Each waits for
# the whole previous job (a dependency on an array job's id waits for all of its children).
#   aws batch register-job-definition --cli-input-json file://job-definition.json
#   QUEUE=etl SHARDS=200 ./submit.sh
set -eu
QUEUE=${QUEUE:?set QUEUE}
SHARDS=${SHARDS:-200}
env_phase() { printf '{"environment":[{"name":"PHASE","value":"%s"},{"name":"SHARDS","value":"%s"}]}' "$1" "$SHARDS"; }
infer=$(aws batch submit-job --job-name etl-infer --job-queue "$QUEUE" --job-definition etl-shard \
  --array-properties "size=$SHARDS" --container-overrides "$(env_phase infer)" --query jobId --output text)
write=$(aws batch submit-job --job-name etl-write --job-queue "$QUEUE" --job-definition etl-shard \
  --array-properties "size=$SHARDS" --container-overrides "$(env_phase write)" \
  --depends-on "jobId=$infer" --query jobId --output text)
aws batch submit-job --job-name etl-commit --job-queue "$QUEUE" --job-definition etl-shard \
  --container-overrides "$(env_phase commit)" --depends-on "jobId=$write" --query jobId --output text
