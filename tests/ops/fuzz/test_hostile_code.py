"""The user's project folder, hostile (issue 56, classes 4 and 5): secrets never ship, whatever their name, case,
size or link; version control and tpuctl's own run folders never ship, whatever the ignore files say; names that are
not UTF-8 and walks past the bounds are one line; a plug-in reference is checked against what ships
(``usercode.resolve_ref``). Through ``tpuctl image build --code DIR --dry-run`` (the context it would send, the note
naming what stays out) and ``tpuctl train``; in-process, quick."""

from __future__ import annotations

import base64
import json
import os
import shlex
import shutil
import sqlite3
import subprocess

import pytest

from ground.errors import UserError
from tpuctl.services import image, usercode

from clifixtures import error_line, invoke
from stackfixtures import write_outputs

OUTPUTS = {"project": "my-project-1", "region": "us-central1", "zone": "us-central1-a",
           "buckets": {"data": "tpuctl-my-project-1-data", "staging": "tpuctl-my-project-1-staging",
                       "artifacts": "tpuctl-my-project-1-artifacts"},
           "training_service_account": "tpuctl-trainer@my-project-1.iam.gserviceaccount.com"}
SA_KEY = json.dumps({"type": "service_account", "project_id": "p", "private_key_id": "abc",
                     "private_key": "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n",
                     "client_email": "sa@p.iam.gserviceaccount.com"})
USER_CREDENTIALS = json.dumps({"client_id": "1.apps.googleusercontent.com", "client_secret": "s",
                               "refresh_token": "1//0g", "type": "authorized_user"})
OPENSSH_KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n"


@pytest.fixture
def project(tmp_path):
    folder = tmp_path / "my-project"
    folder.mkdir()
    (folder / "model.py").write_text("def build(ctx):\n    pass\n")
    return folder


def _shipped(project, tmp_path):
    """(the files the code layer's context holds, the note naming the secrets) of ``image build --dry-run``."""
    outputs = write_outputs(tmp_path / "outputs.json", OUTPUTS)
    result = invoke(["image", "build", "--code", str(project), "--outputs", str(outputs), "--dry-run"])
    assert result.exit_code == 0, result.output
    context = {name.removeprefix("code/") for name in json.loads(result.stdout)["context"] if name.startswith("code/")}
    notes = [line for line in result.stderr.splitlines() if "left out of the image as secrets" in line]
    return context, notes[0] if notes else ""


def _token_db(path, table):
    db = sqlite3.connect(path)
    db.execute(f'CREATE TABLE IF NOT EXISTS "{table}" (account_id TEXT PRIMARY KEY, value BLOB)')
    db.execute(f'INSERT INTO "{table}" VALUES (?, ?)', ("me@example.com", b"ya29.token"))
    db.commit()
    db.close()


def test_secrets_are_recognised_by_content_at_any_size_name_or_case(project, tmp_path):
    (project / "KEY.JSON").write_text(SA_KEY)                                     # capitals
    (project / "sa.json.bak").write_text(SA_KEY)                                  # another suffix
    (project / "padded.json").write_text(SA_KEY[:-1] + ', "note": "' + "x" * 100_000 + '"}')   # over 64 KiB
    (project / "deploy_key").write_text(OPENSSH_KEY)                              # not named id_*
    (project / "notes.txt").write_text("a" * (2 << 20) + "\n-----BEGIN RSA PRIVATE KEY-----\nMII\n")  # deep inside
    (project / "key16.json").write_bytes(SA_KEY.encode("utf-16"))                 # UTF-16 with its BOM
    (project / "adc").write_text(USER_CREDENTIALS)                                # OAuth user credentials
    _token_db(project / "cache.sqlite", "access_tokens")                          # a token database, any name
    (project / ".ENV").write_text("TOKEN=1")                                      # a name in capitals
    (project / "Server.PEM").write_text("not armoured")
    (project / "readme.md").write_text("the key looks like '-----BEGIN PRIVATE KEY' (no dashes after)")
    (project / "tls-secret.yaml").write_text("data:\n  tls.key: " + base64.b64encode(OPENSSH_KEY.encode()).decode())
    (project / ".envrc").write_text("export TOKEN=1\n")
    context, note = _shipped(project, tmp_path)
    assert context == {"model.py", "readme.md"}, context
    for name in ("KEY.JSON", "sa.json.bak", "padded.json", "deploy_key", "notes.txt", "key16.json", "adc",
                 "cache.sqlite", ".ENV", "Server.PEM", "tls-secret.yaml", ".envrc"):
        assert name in note, (name, note)


def test_a_copied_gcloud_folder_is_left_out_whole(project, tmp_path):
    gcloud = project / "conf" / "gcloud"
    (gcloud / "legacy_credentials" / "me@example.com").mkdir(parents=True)
    (gcloud / "configurations").mkdir()
    (gcloud / "configurations" / "config_default").write_text("[core]\naccount = me@example.com\n")
    (gcloud / "active_config").write_text("default")
    _token_db(gcloud / "credentials.db", "credentials")
    _token_db(gcloud / "access_tokens.db", "access_tokens")
    (gcloud / "legacy_credentials" / "me@example.com" / "adc.json").write_text(USER_CREDENTIALS)
    (project / "conf" / "settings.py").write_text("X = 1\n")
    copied = project / "backup"                                   # the token databases alone, under other names
    copied.mkdir()
    _token_db(copied / "credentials.DB", "credentials")
    context, note = _shipped(project, tmp_path)
    assert context == {"model.py", "conf/settings.py"}, context
    assert "conf/gcloud" in note and "backup/credentials.DB" in note, note


def test_a_link_is_judged_by_its_target(project, tmp_path):
    (project / ".env").write_text("TOKEN=1")
    (project / "settings.txt").symlink_to(".env")                 # a harmless name pointing at .env
    (project / "chain").symlink_to("settings.txt")                # a link to that link
    (project / "keys").mkdir()
    (project / "keys" / "config").write_text("Host *\n")
    (project / ".ssh").symlink_to("keys")                         # a secret name pointing at a harmless folder
    (project / "ssh-copy").symlink_to(".ssh")                     # and a harmless name pointing at that
    os.link(project / ".env", project / "hard.txt")               # a hard link: the same file as .env
    (project / ".git").mkdir()
    (project / ".git" / "config").write_text('[remote "origin"]\nurl = https://user:ghp_token@github.com/x\n')
    (project / "vcs").symlink_to(".git")                          # version control through a link
    context, note = _shipped(project, tmp_path)
    assert context == {"model.py", "keys/config"}, context
    for name in ("settings.txt", "chain", "ssh-copy", "hard.txt", ".ssh"):
        assert name in note, (name, note)


def test_credential_files_and_other_version_control_never_ship_by_name(project, tmp_path):
    """A sixth trial: an editor's backup of .env, git credentials under another name, other tools' token files and
    other version control systems' folders shipped."""
    for name in (".env~", ".env ", ".git-credentials.old", "git-credentials.txt", ".databrickscfg", ".vault-token",
                 "secrets.toml", "terraform.tfstate", "terraform.tfstate.backup", "prod.tfvars", "dev.tfvars.json"):
        (project / name).write_text("TOKEN=x\n")
    for folder in ("CVS", ".bzr/branch", ".kaggle"):
        (project / folder).mkdir(parents=True)
        (project / folder / "f").write_text("x\n")
    (project / "environment.py").write_text("X = 1\n")                  # a name that only begins like .env
    context, note = _shipped(project, tmp_path)
    assert context == {"model.py", "environment.py"}, context
    assert all(name in note for name in (".env~", "git-credentials.txt", ".kaggle", ".vault-token", "prod.tfvars",
                                         "terraform.tfstate.backup")), note


def test_a_line_break_in_a_folders_name_keeps_every_rule_and_the_note_one_line(project, tmp_path):
    """A seventh trial: below a folder named with a line break, `.git/`, `.env`, `.ssh/` and an ignored file shipped
    (a `**/` pattern does not match across the break), and a secret's name with line breaks printed a forged
    `error:` line inside the note."""
    odd = project / "a\nb"
    (odd / ".git").mkdir(parents=True)
    (odd / ".git" / "config").write_text("[core]\n")
    (odd / ".env").write_text("TOKEN=1\n")
    (odd / ".ssh").mkdir()
    (odd / ".ssh" / "config").write_text("Host x\n")
    (odd / "notes.secret").write_text("x")
    (project / ".gitignore").write_text("*.secret\n")
    (project / "x\nerror: all good\nq.pem").write_text("x")
    context, note = _shipped(project, tmp_path)
    assert context == {"model.py", ".gitignore"}, context
    assert "a b/.env" in note and "x error: all good q.pem" in note, note


def test_a_hard_link_into_version_control_or_a_run_never_ships(project, tmp_path):
    """A fifth trial: a hard link to .git/config (a remote's token in its URL) under a harmless name shipped; the
    same file under any name stays out, and a hard link between two files of the project ships."""
    (project / ".git").mkdir()
    (project / ".git" / "config").write_text("[core]\n\tbare = false\n")
    os.link(project / ".git" / "config", project / "settings.ini")
    (project / "runs" / "r1").mkdir(parents=True)
    (project / "runs" / "r1" / "weights.bin").write_bytes(b"w")
    os.link(project / "runs" / "r1" / "weights.bin", project / "weights.bin")
    os.link(project / "model.py", project / "model_copy.py")
    context, note = _shipped(project, tmp_path)
    assert context == {"model.py", "model_copy.py"}, context
    assert "settings.ini (the same file as .git/config" in note and "weights.bin (the same file as runs/r1/" in note


def test_version_control_and_run_folders_never_ship_whatever_the_ignore_files_say(project, tmp_path):
    (project / ".git").mkdir()
    (project / ".git" / "config").write_text('[remote "origin"]\nurl = https://user:ghp_token@github.com/x\n')
    (project / ".GIT").mkdir()
    (project / ".GIT" / "HEAD").write_text("ref")
    (project / "sub").mkdir()
    (project / "sub" / ".git").write_text("gitdir: ../.git/modules/sub\n")   # a submodule's .git is a file
    for ignore in (".gitignore", ".dockerignore"):
        (project / ignore).write_text("!.git/\n!.git\n!runs/\n!/runs/\n!.tpuctl-cache/\n")
    (project / "runs" / "20261201-101010").mkdir(parents=True)
    (project / "runs" / "20261201-101010" / "ckpt.index").write_text("w")
    (project / "out" / "my-run").mkdir(parents=True)                        # a run folder elsewhere (--model-dir)
    (project / "out" / "my-run" / "tpuctl-run.json").write_text("{}")
    (project / "out" / "my-run" / "weights.h5").write_text("w")
    (project / "out" / "keep.py").write_text("")
    context, _ = _shipped(project, tmp_path)
    assert context == {"model.py", ".gitignore", ".dockerignore", "out/keep.py"}, context


def test_the_run_markers_are_the_ones_runs_and_trials_write():
    from ground.envs import REPO_ROOT
    from tpuctl.services.runs import records
    from tpuctl.services.runs.tuning import local

    assert records.RUN_FILE in usercode.RUN_MARKERS and local.TRIAL_FILE in usercode.RUN_MARKERS
    assert f'LOCK_FILE = "{usercode.RUN_MARKERS[2]}"' in (REPO_ROOT / "trainer" / "rundir.py").read_text()


def test_a_large_file_in_a_run_folder_no_longer_blocks_a_local_run(project, monkeypatch):
    (project / "runs" / "20261201-101010").mkdir(parents=True)
    with open(project / "runs" / "20261201-101010" / "model.ckpt", "wb") as fh:
        fh.truncate(usercode.MAX_PROJECT_BYTES + 1)                          # sparse: never read
    monkeypatch.chdir(project)
    result = invoke(["train", "--model", "model.py:build", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout[result.stdout.index("{"):])["processes"]


def test_a_file_name_that_is_not_utf8_is_one_line_naming_its_folder(project, tmp_path):
    (project / "data").mkdir()
    (project / "data").joinpath(os.fsdecode(b"caf\xe9.csv")).write_text("1")
    outputs = write_outputs(tmp_path / "outputs.json", OUTPUTS)
    line = error_line(invoke(["image", "build", "--code", str(project), "--outputs", str(outputs), "--dry-run"]))
    assert "not UTF-8" in line and "'data'" in line and "caf\\xe9.csv" in line, line
    (project / ".dockerignore").write_text("data/\n")                       # left out: no longer in the way
    assert "data" not in str(_shipped(project, tmp_path)[0])


def test_the_walk_stops_where_the_file_bound_is_passed(project, monkeypatch):
    monkeypatch.setattr(usercode, "MAX_PROJECT_FILES", 10)
    for folder in ("a", "z"):
        (project / folder).mkdir()
        for i in range(11 if folder == "a" else 300):
            (project / folder / f"f{i:03}.txt").write_text("")
    seen = []
    real_scandir = os.scandir
    monkeypatch.setattr(os, "scandir", lambda path: (seen.append(os.path.basename(path)), real_scandir(path))[1])
    monkeypatch.chdir(project)
    line = error_line(invoke(["train", "--model", "model.py:build", "--dry-run"]))
    assert "more than 10 files" in line and "a/f0" in line and ".dockerignore" in line, line
    assert "z" not in seen, seen                                            # never walked past the bound


def test_a_file_swapped_after_the_scan_is_never_packed(project, tmp_path):
    shipped = usercode.scan_project(project)
    (project / "model.py").write_text(OPENSSH_KEY)                           # the same size or not: a new content
    with pytest.raises(UserError, match="changed"):
        image.write_context("cpu", tmp_path / "ctx.tar.gz", project=shipped)
    (project / "model.py").unlink()
    os.mkfifo(project / "model.py")                                          # a FIFO now: never waited on
    with pytest.raises(UserError):
        shipped.read(shipped.files[0])


# ------------------------------------------------------------------------------ class 5: what a cloud run refers to

@pytest.fixture
def refs(project):
    (project / "pkg" / "sub").mkdir(parents=True)
    (project / "pkg" / "__init__.py").write_text("")
    (project / "pkg" / "sub" / "__init__.py").write_text("from .models import *\n")
    (project / "pkg" / "models.py").write_text("import os\nif os.environ.get('X'):\n    def build(ctx): pass\n"
                                               "else:\n    build = None\nexamples = lambda ctx: None\n")
    (project / "ignored").mkdir()
    (project / "ignored" / "m.py").write_text("def build(ctx): pass\n")
    (project / ".dockerignore").write_text("ignored/\nescape.py\n")
    (project / "broken.py").write_text("def build(ctx:\n")
    (project / "deleted.py").write_text("def build(ctx): pass\ndel build\n")
    (project / "data.py").write_text("CLASSES = ['cat', 'dog']\nSIZE: int = 32\nmake = CLASSES.copy\n"
                                     "def build(ctx): pass\nbuild = build\n")
    (project / "requirements.txt").write_text("my-models>=1\n")
    (project.parent / "outside.py").write_text("def build(ctx): pass\n")
    (project / "escape.py").symlink_to(project.parent / "outside.py")
    return usercode.scan_project(project)


@pytest.mark.parametrize("ref, seen", [
    ("model.py:build", "model.py:build"),
    ("./pkg/../model.py:build", "model.py:build"),
    ("pkg/models.py:examples", "pkg/models.py:examples"),
    ("pkg.models:build", "pkg.models:build"),
    ("pkg.sub:anything", "pkg.sub:anything"),            # a star import: taken on trust
    ("my_models.zoo:build", "my_models.zoo:build"),      # a requirement the image installs
    ("data.py:make", "data.py:make"),                    # a call's or an attribute's value: the trainer says
    ("data.py:build", "data.py:build"),
])
def test_a_reference_to_what_ships_is_given_as_the_image_sees_it(refs, ref, seen):
    assert usercode.resolve_ref(refs, ref, "--model") == seen


def test_an_absolute_path_inside_the_folder_is_made_relative(refs):
    assert usercode.resolve_ref(refs, f"{refs.root}/pkg/models.py:build", "--model") == "pkg/models.py:build"


@pytest.mark.parametrize("ref, key", [
    ("../outside.py:build", "is outside --code"),
    ("/etc/passwd.py:build", "is outside --code"),
    ("escape.py:build", "is left out of the image"),      # an ignored link that leads out
    ("missing.py:build", "does not exist"),
    ("ignored/m.py:build", "is left out of the image"),
    ("model.py:nothing", "defines no nothing"),
    ("broken.py:build", "does not compile"),
    ("os.path:join", "no module os.path"),
    ("pkg.missing:build", "no module pkg.missing"),
    ("model.py", "name a function"),
    ("a\\b.py:build", "is outside --code"),
    ("deleted.py:build", "defines no build"),               # a fifth trial: `del build` unbinds it
    ("data.py:CLASSES", "is a list, not a function"),       # a sixth trial: a literal named as the function
    ("data.py:SIZE", "is a constant, not a function"),
])
def test_a_reference_the_image_cannot_satisfy_is_one_line(refs, ref, key):
    with pytest.raises(UserError) as err:
        usercode.resolve_ref(refs, ref, "--model")
    assert key in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_a_reference_to_a_secret_says_so(project):
    (project / "keys.py").write_text("def build(ctx): pass\nKEY = '''" + OPENSSH_KEY + "'''\n")
    with pytest.raises(UserError, match="left out of the image as a secret"):
        usercode.resolve_ref(usercode.scan_project(project), "keys.py:build", "--dataset")


@pytest.mark.parametrize("ref", ["../outside.py:build", "/etc/x.py:build", "missing.py:build", "model.py:nothing"])
def test_a_vertex_dry_run_refuses_a_reference_the_image_cannot_satisfy(project, tmp_path, monkeypatch, ref):
    (project.parent / "outside.py").write_text("def build(ctx): pass\n")
    outputs = write_outputs(tmp_path / "outputs.json", OUTPUTS)
    monkeypatch.chdir(project)
    result = invoke(["train", "--target", "vertex", "--outputs", str(outputs), "--model", ref,
                     "--data-dir", "gs://tpuctl-my-project-1-data/t", "--dry-run"])
    assert "--model" in error_line(result) and result.stdout == ""     # no request printed: nothing would run


@pytest.mark.parametrize("command", [
    "python model.py", "python3 -u -W ignore model.py --epochs 3", "python -m pkg.models", "python -mpkg.models",
    "python -m pip list", "python -c 'print(1)'", "bash -e pkg/run.sh", "./pkg/run.sh",
    "/usr/bin/env PYTHONUNBUFFERED=1 python model.py", "env -u HOME python3 -m pkg.models", "python -m json.tool",
    "python -m tensorboard.main", "python /opt/image/train.py", "/usr/bin/python3 model.py", "make train",
    "python pkg",                                                     # a folder with its __main__.py
    # behind the programs that run another (a sixth trial: only env was looked behind)
    "timeout 1h python model.py", "timeout -k 5 -s INT 30m ./pkg/run.sh", "nohup python -m pkg.models",
    "nice -n 10 bash pkg/run.sh", "stdbuf -oL python3 model.py", "bash -o pipefail +e pkg/run.sh", "env",
    # a seventh trial: clusters of short options (python -s is no standard input; -c or -m inside a cluster)
    "python -s model.py", "python -Bc 'print(1)'", "bash -lc 'python model.py'", "sh -ec 'echo'",
    "python -Im json.tool", "env -S 'python model.py'",
])
def test_a_command_that_runs_what_ships_or_the_images_own_program_passes(refs, command):
    (refs.root / "pkg" / "__main__.py").write_text("print(1)\n")
    """Issue 56 (class 5, a fresh trial): only --model/--dataset were checked against what ships; a --command's
    script was not. A program on the image's PATH, -c code and modules the folder does not hold are the image's."""
    (refs.root / "pkg" / "run.sh").write_text("#!/bin/sh\necho\n")
    (refs.root / "pkg" / "run.sh").chmod(0o755)
    usercode.resolve_command(usercode.scan_project(refs.root), tuple(shlex.split(command)))


@pytest.mark.parametrize("command, key", [
    ("python ../outside.py", "is outside --code"),
    ("python missing.py", "does not exist"),
    ("python3 -X dev ignored/m.py", "is left out of the image"),
    ("python -m pkg.missing", "does not exist"),
    ("bash ../outside.py", "is outside --code"),
    ("./missing.sh", "does not exist"),
    ("python {root}/model.py", "name it relative to that folder"),
    # a fifth trial: behind env, an absolute path of this machine, a module nothing provides, no module name at all
    ("env python ../outside.py", "is outside --code"),
    ("/usr/bin/env FOO=1 python3 missing.py", "does not exist"),
    ("{root}/../outside.py", "a file of this machine"),
    ("python {root}/../outside.py", "a file of this machine"),
    ("python -m nomod", "no module nomod"),
    ("python -m pkg/models", "is not a module name"),
    ("python -m .venv", "is not a module name"),
    # a sixth trial: the image packed every file 0644, so ./FILE could never run there
    ("./noexec.sh", "is not executable"),
    ("./noshebang.py", "has no #! line"),
    # behind the programs that run another; no program at all (its input is empty on a worker: status 0, nothing
    # ran); a script named as a folder (a sixth trial)
    ("timeout 1h python ../outside.py", "is outside --code"),
    ("nohup python missing.py", "does not exist"),
    ("nice -n 5 ./missing.sh", "does not exist"),
    ("timeout 5m", "names no program"),
    ("python", "names no program"),
    ("bash -e", "names no program"),
    ("python -u -", "names no program"),
    ("python model.py/", "names a folder"),
    # a seventh trial: env's split string, xargs, a script read from standard input, bash's valued long options
    ("env -S 'python missing.py'", "does not exist"),
    ("env --split-string='python missing.py'", "does not exist"),
    ("xargs python", "standard input"),
    ("python /dev/stdin", "names no program"),
    ("bash --rcfile model.py missing.sh", "does not exist"),
    ("python -Im model.py", "model/py.py in --code"),        # -m model.py: the module model.py, not the file
])
def test_a_command_whose_script_the_image_cannot_hold_is_one_line(refs, command, key):
    (refs.root / "noexec.sh").write_text("#!/bin/sh\necho\n")
    (refs.root / "noshebang.py").write_text("print(1)\n")
    (refs.root / "noshebang.py").chmod(0o755)
    refs = usercode.scan_project(refs.root)
    with pytest.raises(UserError) as err:
        usercode.resolve_command(refs, tuple(shlex.split(command.format(root=refs.root))))
    assert key in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_an_executable_script_is_packed_executable(project, tmp_path):
    """A sixth trial: every file was packed 0644, so `--command ./run.sh` failed with "Permission denied" in every
    image; a script its owner may run is packed 0755 (and a change of that bit is a change of the code's tag)."""
    import tarfile

    (project / "run.sh").write_text("#!/bin/sh\necho\n")
    (project / "run.sh").chmod(0o755)
    scanned = usercode.scan_project(project)
    context = image.write_context("cpu", tmp_path / "ctx.tar.gz", project=scanned)
    with tarfile.open(context) as tar:
        modes = {m.name: m.mode for m in tar.getmembers() if m.name.startswith("code/")}
    assert modes["code/run.sh"] == 0o755 and modes["code/model.py"] == 0o644, modes
    (project / "run.sh").chmod(0o644)
    assert usercode.scan_project(project).digest() != scanned.digest()


@pytest.mark.parametrize("target", ["vertex", "tpu-vm"])
def test_a_cloud_dry_run_refuses_a_command_the_image_cannot_run(project, tmp_path, monkeypatch, target):
    outputs = write_outputs(tmp_path / "outputs.json", OUTPUTS)
    monkeypatch.chdir(project)
    result = invoke(["train", "--target", target, "--outputs", str(outputs), "--command", "python train.py",
                     "--dry-run", *(["-a", "tpu-v5e-8"] if target == "tpu-vm" else [])])
    line = error_line(result)
    assert "train.py" in line and "does not exist" in line and result.stdout == "", result.output
    (project / "train.py").write_text("print('trained')\n")
    assert invoke(["train", "--target", target, "--outputs", str(outputs), "--command", "python train.py",
                   "--dry-run", *(["-a", "tpu-v5e-8"] if target == "tpu-vm" else [])]).exit_code == 0


@pytest.mark.parametrize("command", ["python", "bash -e", "nohup python -u -"])
def test_a_local_command_that_names_no_program_is_one_line_and_nothing_is_written(project, command, monkeypatch):
    """A sixth trial: `--command python` read its program from a standard input it does not have, ended with status
    0 and was a finished run that ran nothing. Refused on every target before a run folder is made."""
    monkeypatch.chdir(project)
    result = invoke(["train", "--command", command])
    assert result.exit_code == 2 and "names no program" in error_line(result), result.output
    assert not (project / "runs").exists()


# ------------------------------------------------------------- a fresh trial: git's ignore files, more secret shapes

def _git_left_out(project):
    """The files git itself leaves out of ``project`` (its ``status --ignored``), None without git."""
    git = shutil.which("git")
    if git is None:
        return None
    out = subprocess.run([git, "status", "--porcelain", "--ignored", "-uall"], cwd=project, capture_output=True,
                         text=True, check=True, env={**os.environ, "GIT_CONFIG_GLOBAL": os.devnull}).stdout
    return {line[3:] for line in out.splitlines() if line.startswith("!! ")}


def test_gits_ignore_files_are_honoured_as_git_reads_them(project, tmp_path):
    """A fresh trial: only the top .gitignore was read; a nested .gitignore (``*`` and ``!.gitignore`` in a folder of
    secrets) and .git/info/exclude were not, and creds.txt and secrets/prod.txt shipped. Each .gitignore matches
    relative to its own folder, a deeper one overrides a higher one, info/exclude ranks below them all."""
    (project / ".git" / "info").mkdir(parents=True)
    (project / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (project / ".git" / "objects").mkdir()
    (project / ".git" / "refs" / "heads").mkdir(parents=True)
    (project / ".git" / "info" / "exclude").write_text("creds.txt\nlocal.cfg\n")
    (project / "creds.txt").write_text("api_token=abcd\n")
    (project / "secrets").mkdir()
    (project / "secrets" / ".gitignore").write_text("*\n!.gitignore\n")
    (project / "secrets" / "prod.txt").write_text("db_password=hunter2\n")
    (project / "secrets" / "deeper").mkdir()
    (project / "secrets" / "deeper" / "x.txt").write_text("x")
    # lines git cannot read as patterns, which it skips (a seventh trial: a traceback)
    (project / ".gitignore").write_text("*.log\n!\n[z-a]\n\\\n")
    (project / "local.cfg").write_text("x")
    (project / "pkg" / "data").mkdir(parents=True)
    (project / "pkg" / ".gitignore").write_text("/top.txt\ndata/\n!keep.log\n")     # relative to pkg/
    (project / "pkg" / "top.txt").write_text("x")
    (project / "pkg" / "data" / "rows.csv").write_text("x")
    (project / "pkg" / "keep.log").write_text("x")                                   # brought back below the top
    (project / "pkg" / "drop.log").write_text("x")
    (project / "pkg" / "sub").mkdir()
    (project / "pkg" / "sub" / "top.txt").write_text("x")                             # /top.txt: pkg's only
    (project / "data").mkdir()
    (project / "data" / "rows.csv").write_text("x")                                  # data/ of pkg's: not this one
    (project / "other").mkdir()
    (project / "other" / ".gitignore").write_text("!local.cfg\n")                  # above info/exclude
    (project / "other" / "local.cfg").write_text("x")
    context, _ = _shipped(project, tmp_path)
    assert context == {"model.py", ".gitignore", "secrets/.gitignore", "pkg/.gitignore", "pkg/keep.log",
                       "pkg/sub/top.txt", "data/rows.csv", "other/.gitignore", "other/local.cfg"}, context
    left_out = _git_left_out(project)
    if left_out is not None:                                   # git agrees, file for file
        every = {p.relative_to(project).as_posix() for p in project.rglob("*") if p.is_file()
                 and ".git" not in p.relative_to(project).parts}
        assert {rel for rel in every if not any(rel == x or x.endswith("/") and rel.startswith(x)
                                                for x in left_out)} == context, left_out


def test_the_exclude_file_of_a_git_file_is_honoured(project, tmp_path):
    """A submodule's or worktree's .git is a file naming its git folder (``gitdir:``): its info/exclude counts."""
    gitdir = tmp_path / "elsewhere" / "worktrees" / "mine"
    gitdir.mkdir(parents=True)
    (gitdir / "commondir").write_text("../..\n")
    (tmp_path / "elsewhere" / "info").mkdir()
    (tmp_path / "elsewhere" / "info" / "exclude").write_text("token.txt\n")
    (project / ".git").write_text(f"gitdir: {gitdir}\n")
    (project / "token.txt").write_text("t")
    assert _shipped(project, tmp_path)[0] == {"model.py"}


def test_gits_ignore_files_are_read_bounded(project, monkeypatch):
    monkeypatch.setattr(usercode, "MAX_IGNORE_FILES", 3)
    for name in "abcde":
        (project / name).mkdir()
        (project / name / ".gitignore").write_text("*.tmp\n")
        (project / name / "m.py").write_text("")
    with pytest.raises(UserError) as err:
        usercode.scan_project(project)
    assert "more than 3 ignore files" in str(err.value) and "\n" not in str(err.value), str(err.value)
    monkeypatch.setattr(usercode, "MAX_IGNORE_FILES", 100)
    monkeypatch.setattr(usercode, "MAX_IGNORE_TOTAL_BYTES", 20)
    with pytest.raises(UserError, match="ignore files hold more than"):
        usercode.scan_project(project)
    monkeypatch.setattr(usercode, "MAX_IGNORE_TOTAL_BYTES", 10_000)
    (project / "e" / ".dockerignore").write_text("")
    (project / ".dockerignore").write_text("a/\nb/\nc/\nd/\n")          # folders left out: their files never read
    monkeypatch.setattr(usercode, "MAX_IGNORE_FILES", 3)
    assert [f.rel for f in usercode.scan_project(project).files] == [".dockerignore", "e/.dockerignore",
                                                                     "e/.gitignore", "e/m.py", "model.py"]


AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
JWT = "eyJhbGciOiJSUzI1NiIsImtpZCI6IjEifQ.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQifQ.c2lnbmF0dXJl"


@pytest.mark.parametrize("content, kind", [
    (f"[default]\naws_access_key_id = AKIAIOSFODNN7EXAMPLE\naws_secret_access_key = {AWS_SECRET}\n", "AWS credentials"),
    ("[prod]\r\naws_access_key_id=AKIAEXAMPLE000000000\r\naws_secret_access_key=Short/Secret+12345678\r\n",
     "AWS credentials"),
    (f'AWS = dict(\n    x=1)\naws_secret_access_key = "{AWS_SECRET}"\n', "AWS credentials"),
    ('{\n\t"auths": {\n\t\t"registry.example.com": {\n\t\t\t"auth": "dXNlcjpodW50ZXIy"\n\t\t}\n\t}\n}\n',
     "a Docker registry password"),
    (f"apiVersion: v1\nkind: Config\nusers:\n- name: admin\n  user:\n    token: {JWT}\n", "a kubeconfig's credentials"),
    ("users:\n  - name: me\n    user:\n      client-key-data: LS0tLS1CRUdJTiBFQyBQUklWQVRFIEtFWS0tLS0t\n",
     "a kubeconfig's credentials"),
    ("export TOKEN=ya29.a0AfB_byC1234567890abcdefghij\n", "a Google access token"),
    ("ya29.c.b0Aaekm1KxyzABCDEFGHIJ0123456789-_", "a Google access token"),
    ("url = https://x:ghp_" + "A1b2C3d4" * 4 + "wxyz@github.com/a/b\n", "a GitHub token"),
    ("GH=gho_" + "Z" * 36, "a GitHub token"),
    ("token: github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVW\n",
     "a GitHub token"),
    ("KEY_B64=" + base64.b64encode(SA_KEY.encode()).decode() + "\n", "a service-account key (in base64)"),
    ("key: |\n" + "\n".join("  " + line for line in base64.encodebytes(json.dumps(json.loads(SA_KEY), indent=2)
                                                                         .encode()).decode().splitlines()),
     "a service-account key (in base64)"),                            # wrapped at 76 columns, {\n: "ewo…"
    (base64.urlsafe_b64encode(USER_CREDENTIALS.encode()).decode(), "OAuth user credentials (in base64)"),
    # a fifth trial: JSON's escapes, base64 shifted by the text before the secret, other spellings and styles
    (SA_KEY.replace("_", "\\u005f").replace("-----", "\\u002d" * 5),
     "a service-account key"),
    ("{" + ",".join('"' + "".join(f"\\u{ord(c):04x}" for c in k) + '": ' + json.dumps(v)
                    for k, v in json.loads(USER_CREDENTIALS).items()) + "}", "OAuth user credentials"),
    ('{"access_token": "ya\\u00329.' + "x" * 60 + '"}', "a Google access token"),
    ('{"auths": {"r.example": {"\\u0061uth": "dXNlcjpwYXNz"}}}', "a Docker registry password"),
    ('{"auths": {"r.example": {"identitytoken": "eyJhbGciOi' + "x" * 40 + '"}}}', "a Docker registry password"),
    (base64.b64encode((" " + SA_KEY).encode()).decode(), "a service-account key (in base64)"),
    (base64.b64encode(("  " + json.dumps(json.loads(USER_CREDENTIALS), indent=4)).encode()).decode(),
     "OAuth user credentials (in base64)"),
    ("data: x" + base64.b64encode(b"\n" + OPENSSH_KEY.encode()).decode() + "\n", "a private key (in base64)"),
    (f"[default]\nAWS_ACCESS_KEY_ID = AKIAIOSFODNN7EXAMPLE\nAWS_SECRET_ACCESS_KEY = {AWS_SECRET}\n", "AWS credentials"),
    (f"aws_access_key_id: AKIAIOSFODNN7EXAMPLE\naws_secret_access_key: {AWS_SECRET}\n", "AWS credentials"),
    (f"export AWS_SECRET_ACCESS_KEY='{AWS_SECRET}'\n", "AWS credentials"),
    (json.dumps({"kind": "Config", "users": [{"name": "u", "user": {"token": "abcdef0123456789abcdef"}}]}),
     "a kubeconfig's credentials"),
    ("kind: Config\nusers: [{name: u, user: {token: abcdef0123456789abcdef}}]\n", "a kubeconfig's credentials"),
    ("users:\n- name: u\n  user:\n    username: admin\n    password: hunter2\n", "a kubeconfig's credentials"),
    ('[core]\n\tbare = false\n[remote "origin"]\n\turl = https://user:tok@example.com/r.git\n',
     "a URL with a password"),
    # a sixth trial: .gitmodules, pip.conf, actions/checkout's header
    ('[submodule "lib"]\n\tpath = lib\n\turl = https://bob:hunter2@gitlab.com/a/lib.git\n', "a URL with a password"),
    ("[global]\nindex-url = https://bob:hunter2@pypi.example.com/simple\n", "a URL with a password"),
    ("[http]\n\textraheader = AUTHORIZATION: basic eC1hY2Nlc3MtdG9rZW46Z2hzXzEyMw==\n",
     "an HTTP authorization header"),
    # a sixth trial: other hosts' tokens
    ("HF_TOKEN=hf_" + "aBcDeFgHiJ" * 3 + "kLmN\n", "a Hugging Face token"),
    ("variables:\n  CI_TOKEN: glpat-" + "Xy3_" * 5 + "\n", "a GitLab token"),
])
def test_more_secret_shapes_are_recognised_by_content_under_any_name(project, tmp_path, content, kind):
    """A fresh trial: an AWS credentials file, a Docker client configuration with a registry's password, a
    kubeconfig with a user's token or key, a Google access token, a GitHub token and a service-account key in
    base64 shipped silently. Now each stays out under any name, its kind named in the note."""
    (project / "settings.txt").write_text(content)
    context, note = _shipped(project, tmp_path)
    assert context == {"model.py"} and f"settings.txt ({kind})" in note, (context, note)


@pytest.mark.parametrize("content", [
    '"""Reads aws_access_key_id and aws_secret_access_key from the environment."""\n',
    'import os\naws_access_key_id = os.environ["AWS_ACCESS_KEY_ID"]\naws_secret_access_key = os.environ["X"]\n',
    "s3 = boto3.client('s3',\n    aws_access_key_id=key_id,\n    aws_secret_access_key=secret_key,\n)\n",
    "aws_access_key_id = key\naws_secret_access_key = secret\n",
    "aws_secret_access_key = None\n",
    '{"auths": {"registry.example.com": {}}, "credsStore": "desktop"}\n',            # a credential helper's
    "users:\n- name: me\n  user:\n    exec:\n      command: gke-gcloud-auth-plugin\n",   # a plug-in's token
    "jobs:\n  build:\n    steps:\n      - with:\n          token: ${{ secrets.GITHUB_TOKEN }}\n",
    "# a token looks like ghp_xxxx or ya29.xxx (shortened)\nTOKEN_PREFIXES = ('ghp_', 'ya29.')\n",
    "# Hugging Face tokens begin hf_, GitLab's glpat-\nhf_token = os.environ['HF_TOKEN']\n",
    "logo = '" + base64.b64encode(b"\x89PNG" + bytes(range(256)) * 4).decode() + "'\n",
    "payload = '" + base64.b64encode(json.dumps({"type": "metrics", "values": list(range(80))}).encode()).decode()
    + "'\n",
    '{"credHelpers": {"europe-docker.pkg.dev": "gcloud"}}\n',                       # a helper's name only
    "from dataclasses import dataclass\n@dataclass\nclass Team:\n    users: list[str]\n    token: str = ''\n",
    '[remote "origin"]\n\turl = ssh://git@github.com/a/b.git\n',                    # a user name, no password
    "\n".join("".join(chr(97 + (i * j) % 26) for j in range(70)) for i in range(40)),   # a word list
])
def test_code_that_only_mentions_a_secrets_shape_ships(project, tmp_path, content):
    (project / "cloud.py").write_text(content)
    context, note = _shipped(project, tmp_path)
    assert "cloud.py" in context, note


@pytest.mark.parametrize("line, secret", [
    ("--extra-index-url https://user:s3cret@pypi.example.com/simple", "s3cret"),
    ("git+https://ghp_abcdef123456@github.com/a/b.git", "ghp_abcdef123456"),
    ("mypkg @ https://deploy:t0ken@files.example.com/mypkg-1.0.whl", "t0ken"),
    ("-i https://u:p%40ss@pypi.example.com/simple", "p%40ss"),
])
def test_a_refused_requirement_never_prints_its_url_password(project, tmp_path, line, secret):
    """A fresh trial: a refused requirements line was quoted whole, its URL's password or token with it."""
    (project / "requirements.txt").write_text(f"pandas\n{line}\n")
    outputs = write_outputs(tmp_path / "outputs.json", OUTPUTS)
    result = invoke(["image", "build", "--code", str(project), "--outputs", str(outputs), "--dry-run"])
    message = error_line(result)
    assert "requirements.txt:2:" in message and "://***@" in message and secret not in result.output, message
