"""What `tpuctl train` shows: one line per epoch in a pipe, one live display on a terminal, the summary;
never the protocol lines, Keras' own lines or TensorFlow's start-up notices (unless --verbose), always a
real TensorFlow error line."""

from __future__ import annotations

import os
import pty
import re
import subprocess
from pathlib import Path

from ground.envs import ops_python

from procfixtures import read_terminal

PROTOCOL = re.compile(r"^(epoch-start|epoch-end|progress|tpuctl-result): ", re.M)
NOISE = ("Could not find cuda drivers", "failed call to cuInit", "oneDNN custom operations",
         "MultiDeviceSaver.save.<locals>.tf_function_save")     # a parameter-server chief's saves (issue 57)
REAL = "OP_REQUIRES failed: a real problem the user must see"


def _env(fake_trainer, tmp_path):
    return {**fake_trainer, "FAKE_MODE": "chatty", "TPUCTL_CACHE_DIR": str(tmp_path / "cache")}


def test_a_pipe_gets_one_plain_line_per_epoch_and_the_summary(fake_trainer, tools, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    proc = tools.run_cli(["train", "--data-dir", str(data), "--epochs", "2"],
                         env={**_env(fake_trainer, tmp_path), "PATH": "/usr/bin:/bin"}, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout + proc.stderr
    assert not PROTOCOL.search(out), out
    assert "Epoch 1/2" not in out and "training: model=" not in out and "3/3 - 1s" not in out   # Keras' lines
    assert not any(n in out for n in NOISE), out
    assert REAL in proc.stderr                                                   # a real error line stays
    epochs = [line for line in proc.stderr.splitlines() if line.startswith("epoch ")]
    assert epochs == [
        "epoch 1/2: loss=0.8000 accuracy=0.6000 val_loss=0.7000 val_accuracy=0.7000 "
        + epochs[0][epochs[0].index("("):],
        "epoch 2/2: loss=0.7000 accuracy=0.7000 val_loss=0.6000 val_accuracy=0.8000 "
        + epochs[1][epochs[1].index("("):],
    ]
    assert epochs[1].endswith(", 120 examples/s)")
    assert "run summary" in proc.stderr and "best val_accuracy  0.8000 (epoch 2)" in proc.stderr
    # the hints name the program as it can be typed here: PATH has no tpuctl in this test, so its path
    tpuctl = str(tools.ops_python.parent / "tpuctl")
    assert f"serve it           {tpuctl} serve " in proc.stderr and f"curves             {tpuctl} board " in proc.stderr
    assert proc.stdout.splitlines()[-2].startswith("SavedModel: ")     # scripts still get the two result lines


def test_verbose_shows_everything(fake_trainer, tools, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    proc = tools.run_cli(["train", "--data-dir", str(data), "--verbose"], env=_env(fake_trainer, tmp_path),
                         cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "epoch-start: 1/2" in proc.stdout and "Epoch 1/2" in proc.stdout and "tpuctl-result: " in proc.stdout
    assert all(n in proc.stderr for n in NOISE)


def test_a_terminal_gets_one_live_display_and_the_summary(fake_trainer, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    master, slave = pty.openpty()
    env = {**os.environ, **_env(fake_trainer, tmp_path), "COLUMNS": "120", "TERM": "xterm"}
    proc = subprocess.Popen([str(ops_python()), "-m", "tpuctl.cli", "train", "--data-dir", str(data)],
                            stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=env, cwd=tmp_path)
    os.close(slave)
    try:
        screen = read_terminal(master, proc, "the run to end on its terminal")
    finally:
        os.close(master)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen.decode("utf-8", "replace"))
    assert proc.returncode == 0, text[-3000:]
    assert not PROTOCOL.search(text), text
    assert not any(n in text for n in NOISE) and "Epoch 1/2" not in text
    assert "━" in text                       # rich's progress bar was drawn
    assert text.count("epoch 2/2: loss=0.7000") >= 1 and "run summary" in text
    assert "best val_accuracy  0.8000 (epoch 2)" in text


def test_the_live_row_keeps_its_epoch_steps_and_eta_at_80_columns_and_goes_at_the_end(monkeypatch):
    """Issue 44, found as a new user: below ~170 columns the row lost its bar and step count to the previous epoch's
    metrics (`epo… loss=…`) and a stale copy stayed above the summary. The row is the epoch, the bar, the steps and
    the ETA; the metrics are the epoch lines above it; it is gone once the run ends."""
    import io

    from rich.console import Console

    from tpuctl.commands.display import TrainDisplay
    from trainer import protocol

    monkeypatch.setenv("COLUMNS", "80")
    screen = io.StringIO()
    display = TrainDisplay(terminal=True, stream=screen)
    metrics = {"loss": 0.123456, "accuracy": 0.9, "val_loss": 0.2, "val_accuracy": 0.95, "learning_rate": 0.001,
               "examples_per_second": 1234.0}
    display.on_message("trainer", protocol.Message(protocol.EPOCH_START, (1, 10, {})))
    display.on_message("trainer", protocol.Message(protocol.PROGRESS, (400, 400)))
    display.on_message("trainer", protocol.Message(protocol.EPOCH_END, (1, 10, metrics)))
    display.on_message("trainer", protocol.Message(protocol.EPOCH_START, (2, 10, {})))
    display.on_message("trainer", protocol.Message(protocol.PROGRESS, (123, 400)))
    frame = io.StringIO()
    Console(file=frame, width=80).print(display._progress.get_renderable())
    [row] = [line for line in frame.getvalue().splitlines() if line.strip()]
    assert row.startswith("epoch 2/10 ") and "123/400" in row and "━" in row and len(row) <= 80, row
    assert "loss" not in row                                  # epoch 1's numbers are the line above, not the row
    display.close()
    assert "epoch 1/10: loss=0.1235" in screen.getvalue()


def test_a_trainer_line_reaches_the_terminal_without_its_escape_sequences():
    """One sanitiser for every string that reaches a terminal (issue 43): a trainer's error line quotes a file or a
    class folder's name, whose escape sequences (a window title, a screen clear) must not reach the terminal."""
    import io

    from tpuctl.commands.display import TrainDisplay

    screen = io.StringIO()
    display = TrainDisplay(terminal=False, stream=screen)
    display.stderr_sink().write("error: shard /d/\x1b]0;evil\x07x\x1b[2J.tfrecord [/x] is a FIFO\n")
    assert screen.getvalue() == "error: shard /d/x.tfrecord [/x] is a FIFO\n", repr(screen.getvalue())


def test_a_programs_own_output_reaches_the_terminal_without_its_escape_sequences(capsys):
    """A sixth trial: a --command program's stdout (shown as it prints it) passed a window title and a screen clear
    to the terminal while its stderr was cleaned; both streams go through the one sanitiser."""
    from tpuctl.commands.display import TrainDisplay

    display = TrainDisplay(terminal=False, verbose=True)
    display.stdout_sink().write("step 1\x1b]52;c;ZXZpbA==\x07 done\x1b[2J\n")
    assert capsys.readouterr().out == "step 1 done\n"


def test_the_trainers_stop_line_says_how_this_user_continues():
    """Issue 57: after Ctrl-C a `tpuctl train --name NAME` user read the trainer's "preempted: stopped by SIGTERM …
    run it again with the same --model_dir" (once per worker). With the run's resume hint the display shows one
    `stopped:` line in the user's own words; tpuctl's error line after it names the signal it got. The lines are the
    trainer's own (trainer.errors), as it prints them, a cluster's prefixed with their process."""
    import io

    from tpuctl.commands.display import TrainDisplay
    from trainer import protocol
    from trainer.errors import Diverged, Preempted

    hint = "run the same command again with --name night-run"
    screen = io.StringIO()
    sink = TrainDisplay(terminal=False, stream=screen, resume_hint=hint).stderr_sink()
    stop = f"{protocol.PREEMPTED}{Preempted(2, 13, 44)}"
    sink.write(f"[worker 0] {stop}\n[chief] {stop}\n")
    sink.write(f"error: {Diverged('at epoch 3 step 7/44', 'the loss is nan')}\n")
    shown = screen.getvalue().splitlines()
    assert shown[0] == f"stopped: the backup holds epoch 2 step 13/44: to go on from there, {hint}", shown
    assert len(shown) == 2 and "--model_dir" not in screen.getvalue() and "SIGTERM" not in screen.getvalue(), shown
    assert shown[1].startswith("error: training diverged at epoch 3 step 7/44") and shown[1].endswith(hint), shown
    # the tail of TensorFlow's coordination error a chief logs when its workers stopped first (its first line is an
    # E0000 notice): not shown either
    sink.write("[chief] E0000 00:00:1 1 coordination_service_agent.cc:1] Polled an error: The following tasks are "
               "unhealthy (stopped sending heartbeats):\n[chief] /job:worker/replica:0/task:0\n[chief] The tasks have "
               "crashed. Check the task logs for an earlier error\n")
    # and a worker's last heartbeat to the chief that stopped first (issue 57: two gRPC lines after a Ctrl-C)
    sink.write("[worker 0] Additional GRPC error information from remote target /job:chief/replica:0/task:0 while "
               "calling /tensorflow.CoordinationService/Heartbeat:\n[worker 0] :UNKNOWN:Error received from peer  "
               '{grpc_message:"failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:41567: '
               'Failed to connect to remote host: Connection refused", grpc_status:14}\n')
    assert screen.getvalue().splitlines() == shown
    # a process's own error line is shown even where it quotes such a notice (issue 56: a worker that exited 0 early
    # left its chief's error, "The following tasks are unhealthy …", dropped and the run ended with no line at all)
    own = ("[chief] error: m.py:7: --model m.py:build raised UnavailableError: The following tasks are unhealthy "
           "(stopped sending heartbeats): /job:worker/replica:0/task:0")
    sink.write(own + "\n")
    assert screen.getvalue().splitlines() == [*shown, own]
    # without a hint (a tuning trial), or with --verbose, the trainer's lines as they are
    plain = io.StringIO()
    TrainDisplay(terminal=False, stream=plain).stderr_sink().write(f"{stop}\n")
    assert plain.getvalue() == f"{stop}\n"


def test_a_run_on_an_80_column_terminal_fits_it_without_cutting_a_metric(fake_trainer, tmp_path):
    """Issue 57: the epoch lines and the run summary's metrics line (109 characters) wrapped or were cut in an
    80-column terminal. Seen as a user sees it: a pseudo-terminal 80 columns wide."""
    import shutil
    import tempfile

    from clifixtures import run_in_terminal, wider_than

    project = Path(tempfile.mkdtemp(prefix="t", dir="/tmp"))     # the export's path as short as a user's may be
    try:
        (project / "data").mkdir()
        code, lines = run_in_terminal(["train", "--data-dir", project / "data", "--name", "narrow"], columns=80,
                                      env=_env(fake_trainer, tmp_path), cwd=project)
    finally:
        shutil.rmtree(project)
    screen = "\n".join(lines)
    assert code == 0, screen
    # the display's own lines: each epoch's (and its continuation) and the summary (other lines quote paths and
    # TensorFlow's own messages as they are)
    ours = [line for i, line in enumerate(lines) if line.startswith("epoch ") or line.startswith(" ")
            and i and (lines[i - 1].startswith("epoch ") or lines[i - 1].startswith(" "))]
    ours += lines[lines.index("run summary"):next(i for i, line in enumerate(lines) if line.startswith("SavedModel:"))]
    assert len(ours) > 10 and not wider_than(ours, 80), [line for line in ours if len(line) > 80]
    epoch = [i for i, line in enumerate(lines) if line.startswith("epoch 2/2: ")][-1]
    assert "val_accuracy=0.8000" in lines[epoch] + lines[epoch + 1], screen      # wrapped between metrics, whole
    final = next(i for i, line in enumerate(lines) if line.startswith("  final "))
    assert "val_accuracy=0.8000" in " ".join(lines[final:final + 2]) and "…" not in screen, screen
