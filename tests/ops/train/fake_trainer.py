"""Stand-in for the trainer interpreter (TPUCTL_TRAINER_PYTHON points at a wrapper that runs this).

Called as ``<python> -u -m trainer.task ARGS`` or ``-m trainer.sample_data --out DIR``, like the real
trainer env. Records what it was given in $FAKE_LOG_DIR and behaves per $FAKE_MODE:
ok (default) | fail (error line, exit 3) | hang (wait to be stopped) | ignore-term (also ignores SIGTERM)
| worker-fails (task worker 0 exits 1 after a moment, the chief waits) | worker-leaves (worker 0 exits 0 at
once, the chief fails after a moment) | no-result (exit 0 without the completion
record, as a plug-in that ended the process would leave it) | said-then-exit-0 (the same after an error line).
"""

import json
import os
import signal
import sys
import time
from pathlib import Path

argv = sys.argv[1:]
if argv and argv[0] == "-u":
    argv = argv[1:]
assert argv[0] == "-m", argv
module, args = argv[1], argv[2:]
log_dir = Path(os.environ["FAKE_LOG_DIR"])
log_dir.mkdir(parents=True, exist_ok=True)
mode = os.environ.get("FAKE_MODE", "ok")


def write_whole(path: Path, text: str) -> None:
    """Written under another name, then renamed: a test reading it never sees half of it."""
    path.with_name(path.name + ".tmp").write_text(text)
    path.with_name(path.name + ".tmp").replace(path)


def flag(name, default=None):
    return args[args.index(name) + 1] if name in args else default


if module == "trainer.sample_data":
    out = Path(flag("--out"))
    with open(log_dir / "sample_data.calls", "a") as f:
        f.write(str(out) + "\n")
    out.mkdir(parents=True, exist_ok=True)
    files = {"train": ["digits-train-00000-of-00001.tfrecord"], "validation": ["digits-validation-00000-of-00001.tfrecord"]}
    for names in files.values():
        for name in names:
            (out / name).write_bytes(b"fake records")
    manifest = {"splits": {k: {"files": v, "examples": 10} for k, v in files.items()}, "classes": ["0", "1"]}
    (out / "manifest.json").write_text(json.dumps(manifest))
    print("summary: " + json.dumps({"train": 10, "validation": 10, "classes": ["0", "1"], "shards": 2, "bytes": 24}))
    sys.exit(0)

if module == "trainer.make_tfrecords":
    src, dest = Path(args[0]), Path(args[1])
    (log_dir / "make_tfrecords.json").write_text(json.dumps({"args": args}))
    if mode == "fail":
        print("error: no images found under " + str(src), file=sys.stderr)
        sys.exit(2)
    dest.mkdir(parents=True, exist_ok=True)
    for i in range(3):
        print(f"progress: {i + 1}/3", flush=True)
    (dest / "x-train-00000-of-00001.tfrecord").write_bytes(b"r" * 100)
    (dest / "manifest.json").write_text("{}")
    skipped = [(str(src / "b" / "bad.jpg"), "truncated", "truncated after 9 bytes (no end-of-image marker)"),
               (str(src / "b" / "[red]x.jpg"), "not-an-image", "not an image: a text file")]
    print("summary: " + json.dumps({"train": 2, "validation": 1, "classes": ["a", "b"], "skipped": len(skipped),
                                    "skipped_files": [f for f, _, _ in skipped],
                                    "skipped_reasons": [{"file": f, "kind": k, "reason": r} for f, k, r in skipped],
                                    "shards": 1, "bytes": 100}))
    sys.exit(0)

assert module == "trainer.task", module
tf_config = json.loads(os.environ.get("TF_CONFIG") or "{}")
task = tf_config.get("task", {"type": "chief", "index": 0})
label = f"{task['type']}-{task['index']}"
record = {
    "args": args, "tf_config": tf_config, "pid": os.getpid(), "pgid": os.getpgid(0),
    "env": {k: os.environ.get(k) for k in ("TFHUB_CACHE_DIR", "TF_USE_LEGACY_KERAS", "PYTHONPATH")},
}
write_whole(log_dir / f"{label}.json", json.dumps(record))
print(f"{label}: epoch 1/1", flush=True)

if mode == "fail":
    print("some warning on stderr", file=sys.stderr)
    print("error: " + os.environ.get("FAKE_ERROR", "--distribution_strategy tpu: no TPU found (fake)"),
          file=sys.stderr, flush=True)
    sys.exit(3)
if mode == "worker-leaves":    # worker 0 ends with status 0 at once (a plug-in's os._exit(0)); the chief then fails
    if label == "worker-0":
        sys.exit(0)
    time.sleep(1.5)
    print("error: the peer stopped sending heartbeats (fake)", file=sys.stderr, flush=True)
    sys.exit(2)
if mode in ("hang", "ignore-term", "worker-fails"):
    if mode == "ignore-term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    write_whole(log_dir / f"{label}.ready", "")
    if mode == "worker-fails" and label == "worker-0":
        time.sleep(0.5)
        print("error: Collective ops is aborted by: peer went away (fake)", file=sys.stderr, flush=True)
        sys.exit(1)
    while True:
        time.sleep(0.2)

if mode == "chatty":   # what the real trainer and TensorFlow print, for the display tests
    for noise in ("2026-11-22 10:00:00.1: I external/local_xla/xla/tsl/cuda/cudart_stub.cc:31] Could not find cuda "
                  "drivers on your machine, GPU will not be used.",
                  "E0000 00:00:1763805600.1 12 cuda_executor.cc:1228] failed call to cuInit: INTERNAL: CUDA error",
                  "I0000 00:00:1763805600.2 12 port.cc:153] oneDNN custom operations are on.",
                  "WARNING:tensorflow:5 out of the last 5 calls to <function MultiDeviceSaver.save.<locals>."
                  "tf_function_save at 0x7efdf4691b20> triggered tf.function retracing. Tracing is expensive and the "
                  "excessive number of tracings could be due to (1) creating @tf.function repeatedly in a loop",
                  "2026-11-22 10:00:01: W tensorflow/core/framework/op_kernel.cc:1841] OP_REQUIRES failed: "
                  "a real problem the user must see"):
        print(noise, file=sys.stderr, flush=True)
    print("training: model=small_cnn strategy=default replicas=1", flush=True)
    for epoch in (1, 2):
        print(f"epoch-start: {epoch}/2", flush=True)
        print(f"Epoch {epoch}/2", flush=True)
        for step in (1, 2, 3):
            print(f"progress: {step}/3", flush=True)
            time.sleep(0.05)
        print(f"3/3 - 1s - loss: 0.{9 - epoch}000 - accuracy: 0.{5 + epoch}000", flush=True)
        print(f"epoch-end: {epoch}/2 accuracy=0.{5 + epoch}000 loss=0.{9 - epoch}000 val_accuracy=0.{6 + epoch}000 "
              f"val_loss=0.{8 - epoch}000 examples_per_second=1{epoch}0.0000", flush=True)

cluster = tf_config.get("cluster", {})
if task["type"] == "chief" and "ps" in cluster:   # a coordinator waits for its servers, like ClusterCoordinator
    peers = [f"{kind}-{i}.json" for kind in ("worker", "ps") for i in range(len(cluster.get(kind, [])))]
    deadline = time.monotonic() + 30
    while not all((log_dir / peer).exists() for peer in peers) and time.monotonic() < deadline:
        time.sleep(0.05)

model_dir = Path(flag("--model_dir"))
if mode in ("no-result", "said-then-exit-0"):
    (model_dir / "checkpoints").mkdir(parents=True, exist_ok=True)    # some work left behind, no result
    if mode == "said-then-exit-0":    # the trainer's own error line, then a plug-in's exit handler's os._exit(0)
        print("error: model.py:3: --model model.py:build raised ValueError: boom (fake)", file=sys.stderr, flush=True)
    sys.exit(0)
if mode == "diverged":          # the trainer's end of a run whose loss is no longer a number (exit 4)
    (model_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
    print("error: training diverged at epoch 1 step 3/5: the loss is nan (fake)", file=sys.stderr, flush=True)
    sys.exit(4)
if task["type"] == "chief":
    export = model_dir / "export" / "small_cnn" / "1"
    export.mkdir(parents=True, exist_ok=True)
    # what tpuctl checks a completion record against: a SavedModel message (schema version 1, one meta graph) and
    # the variables' index; the forged modes are what a plug-in with the trainer's powers left (issue 56)
    # A SavedModel by its wire format: schema version 1 and a meta graph holding a graph (field 2) and the
    # serving_default signature (field 5, a map entry: key 1, value 2); the index ends with a table's magic number.
    entry = b"\x0a\x0fserving_default\x12\x00"
    meta = b"\x12\x00" + b"\x2a" + bytes([len(entry)]) + entry
    if mode == "junk-export":
        (export / "saved_model.pb").write_bytes(b"x")
    elif mode == "no-signature":         # schema version 1 and an empty meta graph: 4 bytes
        (export / "saved_model.pb").write_bytes(b"\x08\x01\x12\x00")
    elif mode != "empty-export":
        (export / "saved_model.pb").write_bytes(b"\x08\x01\x12" + bytes([len(meta)]) + meta)
    (export / "variables").mkdir(exist_ok=True)
    (export / "variables" / "variables.index").write_bytes(b"fake index" + (0xDB4775248B80FB57).to_bytes(8, "little"))
    (export / "variables" / "variables.data-00000-of-00001").write_bytes(b"" if mode == "empty-variables" else b"w")
    # every field of the trainer's record (trainer.protocol.RESULT_FIELDS); "minimal-record" and "bad-value" are a
    # plug-in's forgeries of another shape (issue 56, a fifth trial)
    result = {"export_dir": str(export), "val_accuracy": 0.875, "exported_epoch": 2, "best_epoch": 2,
              "best_val_accuracy": 0.8, "last_val_accuracy": 0.8, "epochs": 2, "stopped_early": False,
              "export": "best", "export_name": "small_cnn", "model": flag("--model", "small_cnn"), "source": "tfrecords",
              "strategy": flag("--distribution_strategy"), "mixed_precision": "off",
              "num_workers": len(sum(tf_config.get("cluster", {}).values(), [])) or 1,
              "train_examples": 10, "validation_examples": 10, "validation_exact": True, "skipped_records": 0,
              "timing": None, "backend": "tensorflow", "keras": "tf_keras"}
    if mode == "other-model":       # another run's record, copied with its export
        result["model"] = "model.py:build"
    if mode == "minimal-record":
        result = {"export_dir": str(export), "val_accuracy": 1.0}
    elif mode == "bad-value":
        result["val_accuracy"] = 7.5
    if mode != "no-result-file":
        write_whole(model_dir / "result.json", json.dumps({**result, "val_accuracy": 0.5} if mode == "other-record"
                                                          else result))
    if mode == "result-then-fail":   # a plug-in's detached child wrote a result.json while the run failed (issue 56)
        print("error: the plug-in failed (fake)", file=sys.stderr, flush=True)
        sys.exit(2)
    print("tpuctl-result: " + json.dumps(result), flush=True)
    if mode == "second-record":     # an atexit handler of a plug-in's, after the trainer's own record (issue 56)
        print("tpuctl-result: " + json.dumps({**result, "val_accuracy": 1.0}), flush=True)
