"""Hostile values into the TPU VM startup script (issue 27, class 1): every field that reaches the script (model,
data and hub-cache folders, the hub handle, trainer flags, the image) comes from a generator of shell
metacharacters and injection payloads; the generated script is RUN with bash, with stub docker/gcloud/curl on
PATH that record their arguments. The property: no injected command ran and every command got the values as
they were given."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ground.errors import UserError
from ground.outputs import read_outputs_file
from tpuctl.services.runs.spec import RunSpec
from tpuctl.services.runs.tpuvm.script import HOST_STATUS_DIR, host_command, registry_host, startup_script

from clifixtures import error_line, invoke
from runfixtures import planned
from stackfixtures import write_outputs

BUCKET = "hostile-bucket"
_STUB = """#!/bin/bash
{ printf '%s\\0' "$#" "${0##*/}" "$@"; } >> "$STUB_LOG"
case "${0##*/}" in
  curl) printf 3 ;;
  docker) exit 7 ;;
  gcloud) [ "${1:-}" = storage ] && cat > "$STUB_DIR/status" ;;
esac
exit 0
"""


def _payloads(marker: Path) -> list[str]:
    m = str(marker)
    return [f"$(touch {m})", f"`touch {m}`", f'"; touch {m}; echo "', f"'; touch {m}; echo '", f"\\\"; touch {m} #",
            f"\ntouch {m}\n", f"${{IFS}}touch${{IFS}}{m}", f"$(touch${{IFS}}{m})", "$WORKER", "${WORKER}", "*", "~",
            "\\", "'", '"', "!", "$((1+1))", "-e", "--", "a b\tc\r", "é中\u202e"]


def _hostile(marker: Path):
    piece = st.one_of(st.sampled_from(_payloads(marker)),
                      st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=12))
    return st.lists(piece, min_size=1, max_size=4).map("".join)


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    """(stub bin folder, outputs, marker path): the stubs record each call as NUL-separated count, name, args."""
    tmp = tmp_path_factory.mktemp("host")
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    for name in ("docker", "gcloud", "curl"):
        (bin_dir / name).write_text(_STUB)
        (bin_dir / name).chmod(0o755)
    outputs = read_outputs_file(write_outputs(tmp / "outputs.json", {
        "project": "hostile-project", "region": "us-central1", "zone": "us-central1-a",
        "buckets": {"data": BUCKET, "artifacts": BUCKET}, "labels": {}}))
    return bin_dir, outputs, tmp / "INJECTED"


def _calls(log: Path) -> list[list[str]]:
    fields = log.read_bytes().decode().split("\0")
    calls, i = [], 0
    while i < len(fields) - 1:
        count = int(fields[i])
        calls.append(fields[i + 1:i + 2 + count])
        i += 2 + count
    return calls


def _run_script(run: RunSpec, bin_dir: Path, work: Path) -> list[list[str]]:
    work.mkdir(exist_ok=True)
    script = work / "startup.sh"
    script.write_text(startup_script(run), encoding="utf-8")
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "STUB_LOG": str(work / "calls"), "STUB_DIR": str(work),
           "HOME": str(work), "LANG": "C.UTF-8"}
    subprocess.run(["bash", str(script)], env=env, cwd=work, check=True, timeout=30,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return _calls(work / "calls")


def test_every_value_reaches_the_host_commands_intact_and_nothing_injected_runs(host, tmp_path_factory, monkeypatch):
    bin_dir, outputs, marker = host
    # the values ride on `--note`, a flag only this test adds after `--`: the planner's reading of the trainer's
    # command line with the trainer's own parser (which refuses it, test_the_trainers_flags_after_the_separator_…)
    # is set aside, so any value reaches the host script and its quoting is what is checked
    from tpuctl.services.runs import spec

    monkeypatch.setattr(spec, "_check_trainer_argv", lambda trainer: None)
    values = _hostile(marker)
    ran = []

    @given(model=values, data=values, hub=values, handle=values, flag=values, image=values)
    def check(model, data, hub, handle, flag, image):
        try:
            run = planned("tpu-vm", outputs, accelerator="v5litepod-16", model="hub", hub_handle=handle,
                          model_dir=f"gs://{BUCKET}/{model}", data_dir=f"gs://{BUCKET}/{data}",
                          hub_cache_dir=f"gs://{BUCKET}/{hub}", trainer_args=("--note", flag), image="img:1")
        except UserError:
            return   # refused at the edge, one line: nothing reaches a host (an empty hub handle, say)
        ran.append(1)
        run = run.model_copy(update={"image": f"r.example/{image}"})   # what the edge's check of --image would refuse
        calls = _run_script(run, bin_dir, tmp_path_factory.mktemp("run"))
        assert not marker.exists(), "an injected command ran"
        by_tool = {}
        for call in calls:
            by_tool.setdefault(call[0], []).append(call[1:])
        words = [w if isinstance(w, str) else "".join(p if isinstance(p, str) else "3" for p in w)
                 for w in host_command(run)]
        assert by_tool["docker"] == [words[1:]]
        assert ["--model_dir", run.model_dir] == words[words.index("--model_dir"):][:2]
        assert words[-2:] == ["--note", flag] and f"TFHUB_CACHE_DIR={run.env['TFHUB_CACHE_DIR']}" in words
        assert by_tool["gcloud"] == [["auth", "configure-docker", registry_host(run), "--quiet"],
                                     ["storage", "cp", "-", f"{run.model_dir}/{HOST_STATUS_DIR}/worker-3.exit"]]

    check()
    assert len(ran) >= 10, "the generator must reach the script, not only the edge's refusals"


def test_a_nul_byte_is_refused_before_anything_is_created(host):
    _, outputs, _ = host
    with pytest.raises(UserError, match="NUL byte"):
        planned("tpu-vm", outputs, accelerator="v5litepod-16", trainer_args=("--note", "a\x00b"), name="hostile-run",
                image="img:1")


@pytest.mark.parametrize("args", [["--model-dir", "runs/z\udcff"], ["--name", "a\udcfe"],
                                  ["--", "--note", "\udcff"]])
def test_bytes_that_are_not_utf8_are_one_line_before_anything_is_created(tmp_path, monkeypatch, args):
    """Issue 56 (a fresh trial): ``--model-dir 'runs/z\\xff'`` made the folder, then the trainer called its backup
    damaged (TensorFlow cannot encode the name). A terminal's bytes that are not UTF-8 reach Python as surrogates."""
    monkeypatch.chdir(tmp_path)
    result = invoke(["train", "--epochs", "1", *args])
    line = error_line(result)
    assert result.exit_code == 2 and "not UTF-8" in line and "\\xf" in line, result.output
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args", [["logs", "x\udcff", "--dir", "gs://bkt/runs"],
                                  ["runs", "ls", "--dir", "gs://bkt/x\udcff"]])
def test_any_argument_that_is_not_utf8_is_one_line(tmp_path, monkeypatch, args):
    """Issue 56 (a fresh trial): these were UnicodeEncodeError tracebacks, exit 1."""
    monkeypatch.chdir(tmp_path)
    result = invoke(args)
    assert result.exit_code == 2 and "not UTF-8" in error_line(result) and "Traceback" not in result.output


@pytest.mark.parametrize("args, key", [
    (["--seed", "\u0661"], "--seed after `--`"), (["--train_batch_size", "\uff13\uff12"], "--train_batch_size after"),
    (["--steps_per_epoch", "1_0"], "ASCII digits"), (["--learning_rate", "\u0661.\u0665e-3"], "--learning_rate after"),
    (["--profile_steps", "\u0661-\u0662"], "--profile_steps after"), (["--code_dir", "/tmp"], "use --code"),
    # a fifth trial: a plug-in function after `--` escaped the check against what ships, and flags the trainer does
    # not take (an abbreviation, a typo, one given twice) passed cloud dry runs
    (["--dataset", "../outside.py:build"], "use --dataset"), (["--model", "/etc/x.py:build"], "use --model"),
    (["--train_ep", "3"], "unrecognized arguments: --train_ep"), (["--lr", "0.1"], "unrecognized arguments: --lr"),
    (["--learning_rate", "0.1", "--learning_rate=0.2"], "--learning_rate is given twice"),
    (["--lr_schedule", "linear"], "--lr_schedule"),
])
def test_the_trainers_flags_after_the_separator_are_read_as_the_trainer_reads_them(tmp_path, monkeypatch, args, key):
    """Issue 56 (a fresh trial): other scripts' digits and underscores after `--` passed a dry run and reached the
    job (int() takes them), and --code_dir after `--` overrode the image's folder."""
    monkeypatch.chdir(tmp_path)
    result = invoke(["train", "--dry-run", "--", *args])
    assert result.exit_code == 2 and key in error_line(result), result.output
    assert invoke(["train", "--dry-run", "--", "--seed", "3"]).exit_code == 0


def test_a_worker_number_that_is_not_a_number_is_zero(host, tmp_path):
    """The metadata server's answer is not trusted either: anything but digits is worker 0."""
    bin_dir, outputs, marker = host
    run = planned("tpu-vm", outputs, accelerator="v5litepod-16", name="hostile-run", image="img:1")
    evil = tmp_path / "evil-bin"
    evil.mkdir()
    for name in ("docker", "gcloud"):
        (evil / name).symlink_to(bin_dir / name)
    (evil / "curl").write_text(f"#!/bin/bash\nprintf '%s' '$(touch {marker})'\n")
    (evil / "curl").chmod(0o755)
    calls = _run_script(run, evil, tmp_path / "w")
    assert not marker.exists()
    assert calls[-1][-1].endswith("/worker-0.exit")
