#!/usr/bin/env bash
# Build the trainer's container images (container/Dockerfile, variants cpu, gpu, tpu, jax-cpu, jax-gpu, jax-tpu) on
# this machine with a real container engine, exactly as `tpuctl image build --local` does, and run each one:
#   cpu  sample data + a 2-epoch demo training as the image's own user into a mounted folder; the exported
#        SavedModel's serving signature is checked inside the image
#        and a user's project on it: examples/tabular-plugin as the code layer (container/Dockerfile.code, built
#        twice: the second finds its content tag and builds nothing), its data made and its plug-in model trained
#        and exported in that image, as a cloud run does (--code_dir /opt/tpuctl/code)
#   gpu  TensorFlow imports; a 1-epoch demo run on the CPU (no GPU here)
#   tpu  TensorFlow imports with libtpu loaded; the demo trains on the CPU inside the tpu image (TensorFlow 2.20),
#        bounded in time (no TPU here: nothing may wait for one)
#   jax-cpu, jax-gpu, jax-tpu
#        Keras 3 on the JAX backend trains inside the image as its own user, on the CPU (two forced JAX devices,
#        DataParallel), from tf.data, and its TF SavedModel export is loaded and called with TensorFlow in the image
#        (tests/fixtures/keras3_jax_smoke.py, mounted read-only: the image's pins at work). jax-cpu also gets the code
#        layer with a Keras 3 project (examples/keras3-sensors, built twice), its data made and its model trained and
#        exported in it by the trainer's own JAX engine (--backend jax), as a cloud run does.
# One summary line per variant (image size, import time, the run's result).
#
# The engine: a `docker` that answers is used as it is. Otherwise, as root, Debian's dockerd (package docker.io,
# installed when missing) is started for this run only, on its own socket and data folder, and stopped at the
# end; nothing else is started or stopped. Its build cache stays in /var/lib/tpuctl-docker, so a second run with
# unchanged sources rebuilds nothing.
# The base image (python:3.11-slim) is pulled when a registry answers; when none can be reached, a stand-in is made
# once with debootstrap (Debian bookworm minbase + Debian's python3, which is 3.11, as /usr/local/bin/python) from
# the Debian mirror this machine's apt sources name, and imported under the same name. Only the stand-in gets this
# machine's CA bundle (builds may reach the package index through a proxy with its own certificate).
#
# Usage: scripts/test-images.sh [cpu] [gpu] [tpu] [jax-cpu] [jax-gpu] [jax-tpu]     (default: all six)
# Env:   TPUCTL_IMAGE_RUN_TIMEOUT  seconds one smoke-test container may run (default 300)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

variants=()
for arg in "$@"; do
  case "$arg" in
    cpu|gpu|tpu|jax-cpu|jax-gpu|jax-tpu) variants+=("$arg") ;;
    *) echo "error: unknown variant '$arg' (use cpu, gpu, tpu, jax-cpu, jax-gpu, jax-tpu)" >&2; exit 2 ;;
  esac
done
[ ${#variants[@]} -gt 0 ] || variants=(cpu gpu tpu jax-cpu jax-gpu jax-tpu)
run_timeout=${TPUCTL_IMAGE_RUN_TIMEOUT:-300}
if ! [[ "$run_timeout" =~ ^[0-9]{1,6}$ ]] || [ "$run_timeout" -lt 1 ]; then
  echo "error: TPUCTL_IMAGE_RUN_TIMEOUT=$run_timeout must be whole seconds from 1 to 999999" >&2; exit 2
fi
tpuctl=.venv/bin/tpuctl
if [ ! -x "$tpuctl" ]; then echo "error: .venv is missing; run scripts/setup.sh first" >&2; exit 2; fi

say() { echo "images: $*"; }
owned_pid=""
work=$(mktemp -d)
cleanup() {
  if [ -n "$owned_pid" ] && kill -0 "$owned_pid" 2>/dev/null; then
    kill "$owned_pid" 2>/dev/null || true
    for _ in $(seq 1 30); do kill -0 "$owned_pid" 2>/dev/null || break; sleep 1; done
    say "stopped the container engine this run started (pid $owned_pid)"
  fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- the engine -------------------------------------------------------------------------------------------------
engine_answers() { timeout 20 docker info >/dev/null 2>&1; }
start_engine() {
  if [ "$(id -u)" != 0 ]; then
    echo "error: no container engine answers ('docker info' failed) and only root can start one here; start Docker or podman's docker socket" >&2
    exit 2
  fi
  if ! command -v dockerd >/dev/null; then
    say "installing Debian's docker.io (the engine)"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io) >"$work/apt.log" 2>&1 \
      || { tail -5 "$work/apt.log" >&2; echo "error: could not install docker.io" >&2; exit 2; }
  fi
  export DOCKER_HOST=unix:///run/tpuctl-docker.sock
  if engine_answers; then return 0; fi   # an engine an earlier run left on our socket
  # No iptables, no bridge: builds use the host's network (--network host), containers run with --network none.
  dockerd --host "$DOCKER_HOST" --pidfile /run/tpuctl-docker.pid --data-root /var/lib/tpuctl-docker \
    --exec-root /run/tpuctl-docker --iptables=false --ip6tables=false --bridge=none \
    >"$work/dockerd.log" 2>&1 &
  owned_pid=$!
  for _ in $(seq 1 60); do
    if engine_answers; then say "started dockerd (pid $owned_pid) on $DOCKER_HOST"; return 0; fi
    kill -0 "$owned_pid" 2>/dev/null || break
    sleep 1
  done
  tail -5 "$work/dockerd.log" >&2
  echo "error: dockerd did not answer within 60 s" >&2
  exit 2
}
if ! command -v docker >/dev/null || ! engine_answers; then start_engine; fi
# A build needs the network only for pip; an engine without a bridge has just the host's.
export TPUCTL_DOCKER_BUILD_NETWORK=${TPUCTL_DOCKER_BUILD_NETWORK:-host}

# --- the base image ---------------------------------------------------------------------------------------------
base=$(sed -n 's/^FROM[[:space:]]\{1,\}\([^[:space:]]*\).*/\1/p' container/Dockerfile | head -1)
debian_mirror() {  # the first Debian archive URI of this machine's apt sources (deb822 or one-line format)
  { grep -h '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' || true
    grep -h '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list | awk '{print $2}' || true
  } 2>/dev/null | grep -v -- '-security' | head -1 || true
}
make_stand_in() {
  local mirror rootfs
  mirror=$(debian_mirror)
  [ -n "$mirror" ] || { echo "error: $base cannot be pulled and no Debian mirror is named in the apt sources" >&2; exit 2; }
  command -v debootstrap >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap) >/dev/null
  rootfs="$work/rootfs"
  say "$base cannot be pulled: making a stand-in with debootstrap (bookworm minbase + python3)"
  debootstrap --variant=minbase --include=python3,python3-pip,python3-venv,ca-certificates,passwd \
    bookworm "$rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 \
    || { tail -5 "$work/debootstrap.log" >&2; echo "error: debootstrap failed" >&2; exit 2; }
  ln -sf /usr/bin/python3 "$rootfs/usr/local/bin/python"
  ln -sf /usr/bin/pip3 "$rootfs/usr/local/bin/pip"
  rm -f "$rootfs"/usr/lib/python3*/EXTERNALLY-MANAGED    # python:3.11-slim's pip installs system-wide
  cp /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/ca-certificates.crt"
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  tar -C "$rootfs" -c . | docker import \
    --change 'ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' --change 'CMD ["python3"]' \
    --change 'LABEL org.tpuctl.stand-in=debootstrap-bookworm' - "$base" >/dev/null
  rm -rf "$rootfs"
}
if docker image inspect "$base" >/dev/null 2>&1; then
  :
elif timeout 60 docker pull -q "$base" >/dev/null 2>&1; then
  say "pulled $base"
else
  make_stand_in
fi
if [ -n "$(docker image inspect -f '{{index .Config.Labels "org.tpuctl.stand-in"}}' "$base" 2>/dev/null)" ]; then
  say "base $base is the debootstrap stand-in (Debian's python 3.11)"
fi

# --- build and run each variant ---------------------------------------------------------------------------------
run_in() {  # docker run with --network none and a time bound; the container is removed whatever happens
  local name="tpuctl-smoke-$$-$RANDOM" rc=0
  timeout "$run_timeout" docker run --name "$name" --network none "$@" || rc=$?
  docker rm -f "$name" >/dev/null 2>&1 || true
  [ "$rc" != 124 ] || echo "error: the container ran past TPUCTL_IMAGE_RUN_TIMEOUT=${run_timeout}s and was stopped" >&2
  return "$rc"
}
# `import trainer, tensorflow, tf_keras` in seconds (the trainer package first, as every entry point does), with the
# image's .pyc files and without them (an empty pycache prefix and no writing make Python compile every module from
# source, as the image did before it shipped byte-compiled files)
# (the JAX images: `import trainer, tensorflow, jax, keras` on the JAX backend)
import_probe='import time; t = time.perf_counter(); import trainer, tensorflow, tf_keras; print(f"{time.perf_counter() - t:.2f}")'
jax_import_probe='import os, time; os.environ["KERAS_BACKEND"] = "jax"; t = time.perf_counter(); import trainer, tensorflow, jax, keras; print(f"{time.perf_counter() - t:.2f}")'
import_seconds() {  # probe image [extra docker args...]
  local probe=$1 img=$2; shift 2
  run_in "$@" --entrypoint python "$img" -c "$probe" 2>>"$work/import.log" | tail -1
}
# Inside the image: the export's serving signature takes encoded image bytes and answers one probability per class.
signature_check='
import json, sys
import tensorflow as tf
result = json.load(open(sys.argv[1]))
model = tf.saved_model.load(result["export_dir"])
fn = model.signatures["serving_default"]
(spec,) = fn.structured_input_signature[1].values()
assert spec.dtype == tf.string and spec.shape.as_list() == [None], spec
image = tf.io.encode_jpeg(tf.zeros([8, 8, 3], tf.uint8))
outputs = fn(tf.constant([image.numpy()]))
(probs,) = [v for v in outputs.values() if v.dtype.is_floating and v.shape.rank == 2]
assert probs.shape[0] == 1 and probs.shape[1] >= 2, probs.shape
assert abs(float(tf.reduce_sum(probs)) - 1.0) < 1e-3, probs
import glob, os
logs = os.path.join(os.path.dirname(sys.argv[1]), "logs")
plugins = {v.metadata.plugin_data.plugin_name for f in glob.glob(f"{logs}/events.out.tfevents.*")
           for e in tf.compat.v1.train.summary_iterator(f) for v in e.summary.value}
assert "hparams" in plugins, plugins
print(f"serving_default({spec.dtype.name}{spec.shape.as_list()}) -> {sorted(outputs)} {probs.shape.as_list()}; "
      "hyperparameters recorded for TensorBoard")
'
# The user's code as a layer on a trainer image (`tpuctl image build --local --code`), and a plug-in run in it, its data
# written and its model trained and exported: on the cpu image the tf_keras tabular plug-in, on jax-cpu the Keras 3
# sensors model on the trainer's JAX backend.
code_layer() {  # variant out-folder; prints one summary phrase
  local variant=$1 out=$2 code_name again accuracy start=$SECONDS project=examples/tabular-plugin backend=()
  if [ "$variant" = jax-cpu ]; then project=examples/keras3-sensors; backend=(--backend jax); fi
  if ! "$tpuctl" image build --local --variant "$variant" --code "$project" >"$work/code.log" 2>&1; then
    tail -25 "$work/code.log" >&2; return 1
  fi
  code_name=$(grep -o "tpuctl/code-$variant:sha256-[0-9a-f]*" "$work/code.log" | head -1 || true)
  [ -n "$code_name" ] || { echo "error: the code build printed no image name" >&2; tail -5 "$work/code.log" >&2; return 1; }
  built_names+=("$code_name")
  again=$("$tpuctl" image build --local --variant "$variant" --code "$project" 2>&1 | tail -1)
  [[ "$again" == *"already exists: nothing to build"* ]] || { echo "error: unchanged code was built again: $again" >&2; return 1; }
  local first; first=$(tail -1 "$work/code.log")
  [[ "$first" == built* ]] && first="built" || first="already built"
  local hp=(--hp_units 16); [ "$variant" = jax-cpu ] && hp=()
  if ! run_in -v "$out:/work" --entrypoint python "$code_name" make_data.py /work/plugin-data >"$work/code-run.log" 2>&1 \
     || ! run_in -v "$out:/work" "$code_name" --code_dir /opt/tpuctl/code --model model.py:build "${backend[@]}" \
          --data_dir /work/plugin-data --model_dir /work/plugin-run --train_epochs 4 "${hp[@]}" >>"$work/code-run.log" 2>&1; then
    tail -15 "$work/code-run.log" >&2; return 1
  fi
  accuracy=$(python3 - "$out/plugin-run/result.json" "${backend[1]:-tensorflow}" <<'PY'
import json, os, sys
r = json.load(open(sys.argv[1]))
assert r["model"] == "model.py:build" and r["source"] == "features", r
assert r.get("backend", "tensorflow") == sys.argv[2], (r.get("backend"), sys.argv[2])
assert os.path.isfile(os.path.join(r["export_dir"].replace("/work", os.path.dirname(os.path.dirname(sys.argv[1])), 1),
                                   "saved_model.pb")), r["export_dir"]
print(f"{r['val_accuracy']:.3f}")
PY
) || { tail -5 "$work/code-run.log" >&2; return 1; }
  echo "code layer $code_name $first, unchanged code not rebuilt, model.py:build trained 4 epochs in it${backend[*]:+ (${backend[*]})} in $((SECONDS - start))s (val_accuracy $accuracy)"
}
failed=0
summaries=()
built_names=()
for v in "${variants[@]}"; do
  start=$SECONDS
  if ! "$tpuctl" image build --local --variant "$v" >"$work/build-$v.log" 2>&1; then
    tail -25 "$work/build-$v.log" >&2
    summaries+=("image $v: FAILED to build (log above)"); failed=1; continue
  fi
  built=$(tail -1 "$work/build-$v.log")
  # the name the build printed (the sources' content tag at build time)
  name=$(grep -o "tpuctl/trainer-$v:sha256-[0-9a-f]*" <<<"$built" | head -1 || true)
  if [ -z "$name" ]; then
    summaries+=("image $v: FAILED: the build printed no image name ($built)"); failed=1; continue
  fi
  built_names+=("$name")
  build_s=$((SECONDS - start))
  size=$(docker image inspect -f '{{.Size}}' "$name" | awk '{printf "%.2f GB", $1 / 1e9}') || size="?"
  out="$work/out-$v"; mkdir -p "$out"
  chown 10001 "$out" 2>/dev/null || chmod 777 "$out"    # the image runs as its own user, uid 10001
  probe=$import_probe; probed="tensorflow+tf_keras"
  if [[ "$v" == jax-* ]]; then probe=$jax_import_probe; probed="tensorflow+jax+keras"; fi
  cold=$(import_seconds "$probe" "$name" -e PYTHONPYCACHEPREFIX=/tmp/no-pyc) || cold="?"
  warm=$(import_seconds "$probe" "$name") || warm="?"
  if [ -z "$warm" ] || [ "$warm" = "?" ]; then
    tail -5 "$work/import.log" >&2
    summaries+=("image $v: FAILED: import $probed (above)"); failed=1; continue
  fi
  if [[ "$v" == jax-* ]]; then
    train_start=$SECONDS
    if ! smoke=$(run_in -v "$out:/work" -v "$root/tests/fixtures/keras3_jax_smoke.py:/smoke/keras3_jax_smoke.py:ro" \
          --entrypoint python "$name" /smoke/keras3_jax_smoke.py /work 2>"$work/smoke-$v.log" | tail -1); then
      tail -15 "$work/smoke-$v.log" >&2
      summaries+=("image $v: FAILED: Keras 3 on the JAX backend in the image (above)"); failed=1; continue
    fi
    train_s=$((SECONDS - train_start))
    owner=$(stat -c %u "$out/keras3-jax-export/saved_model.pb" 2>/dev/null || echo "?")
    if [ "$owner" != 10001 ]; then
      summaries+=("image $v: FAILED: the export belongs to uid $owner, not the image's user 10001"); failed=1; continue
    fi
    # what ran is what the lock pins: jax, keras, and jax-tpu's libtpu / jax-gpu's CUDA plug-in
    if ! detail=$(python3 - "$smoke" "requirements/image-$v.lock" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
pins = dict(line.split("==") for line in open(sys.argv[2]).read().splitlines() if "==" in line and line[0] != "#")
pins = {k.lower().replace("_", "-"): v for k, v in pins.items()}
assert r["backend"] == "jax" and r["devices"] == 2 and r["platform"] == "cpu", r
assert (r["jax"], r["keras"]) == (pins["jax"], pins["keras"]), (r, pins)
assert r["libtpu"] == pins.get("libtpu") and r["jax_cuda12_plugin"] == pins.get("jax-cuda12-plugin"), (r, pins)
extra = f", libtpu {r['libtpu']}" if r["libtpu"] else (f", jax-cuda12-plugin {r['jax_cuda12_plugin']}"
                                                        if r["jax_cuda12_plugin"] else "")
print(f"Keras {r['keras']} on JAX {r['jax']}{extra}: DataParallel over {r['devices']} CPU devices from tf.data, "
      f"{r['epochs']} epochs, val_accuracy {r['val_accuracy']}; its TF SavedModel export loaded by TensorFlow "
      f"answers within {r['export_vs_model']:.0e} of the model")
PY
    ); then
      summaries+=("image $v: FAILED: the Keras 3 run's report ($smoke)"); failed=1; continue
    fi
    if [ "$v" = jax-cpu ]; then
      if ! code_detail=$(code_layer "$v" "$out"); then
        summaries+=("image $v: FAILED: the code layer (above)"); failed=1; continue
      fi
      detail="$detail; $code_detail"
    fi
    summaries+=("image $v: ok — $name, $size, built in ${build_s}s ($built); import $probed ${warm}s (${cold}s without .pyc); $detail; as uid 10001 in ${train_s}s")
    continue
  fi
  epochs=2; [ "$v" = gpu ] && epochs=1
  detail=""
  if [ "$v" = tpu ]; then
    # libtpu must be loaded, not merely installed: TensorFlow lists its TPU_SYSTEM device.
    if ! detail=$(run_in --entrypoint python "$name" -c \
        'import trainer, tensorflow as tf; d = [x.device_type for x in tf.config.list_physical_devices()]; assert "TPU_SYSTEM" in d, d; print("libtpu loaded")' \
        2>"$work/tpu-$v.log" | tail -1); then
      tail -5 "$work/tpu-$v.log" >&2
      summaries+=("image $v: FAILED: libtpu is not loaded by TensorFlow (above)"); failed=1; continue
    fi
    detail="$detail; "
  fi
  train_start=$SECONDS
  if ! run_in -v "$out:/work" --entrypoint python "$name" -m trainer.sample_data --out /work/data \
        >"$work/run-$v.log" 2>&1 \
     || ! run_in -v "$out:/work" "$name" --data_dir /work/data --model_dir /work/run --train_epochs "$epochs" \
        >>"$work/run-$v.log" 2>&1; then
    tail -15 "$work/run-$v.log" >&2
    summaries+=("image $v: FAILED: the demo run in the image (above)"); failed=1; continue
  fi
  train_s=$((SECONDS - train_start))
  owner=$(stat -c %u "$out/run/result.json")
  accuracy=$(python3 -c 'import json, sys; print("%.3f" % json.load(open(sys.argv[1]))["val_accuracy"])' \
    "$out/run/result.json" 2>/dev/null || echo "?")
  if [ "$owner" != 10001 ]; then
    summaries+=("image $v: FAILED: result.json belongs to uid $owner, not the image's user 10001"); failed=1; continue
  fi
  if [ "$v" = cpu ]; then
    if ! sig=$(run_in -v "$out:/work" --entrypoint python "$name" -c "$signature_check" /work/run/result.json \
          2>"$work/sig-$v.log" | tail -1); then
      tail -10 "$work/sig-$v.log" >&2
      summaries+=("image $v: FAILED: the exported SavedModel's signature (above)"); failed=1; continue
    fi
    detail="$detail$sig; "
    if ! code_detail=$(code_layer "$v" "$out"); then
      summaries+=("image $v: FAILED: the code layer (above)"); failed=1; continue
    fi
    detail="$detail$code_detail; "
  fi
  summaries+=("image $v: ok — $name, $size, built in ${build_s}s ($built); import $probed ${warm}s (${cold}s without .pyc); ${detail}demo ${epochs} epoch(s) as uid 10001 in ${train_s}s, val_accuracy $accuracy")
done
# In an engine this run started (its own data folder), older builds of the variants just built are removed so the
# folder does not grow with every change of the sources; a user's own engine is left as it is.
if [ -n "$owned_pid" ]; then
  for name in "${built_names[@]}"; do
    docker image ls --format '{{.Repository}}:{{.Tag}}' "${name%%:*}" | grep -vxF "$name" \
      | xargs -r docker image rm >/dev/null 2>&1 || true
  done
  docker image prune -f >/dev/null 2>&1 || true
fi
printf '%s\n' "${summaries[@]}"
exit "$failed"
