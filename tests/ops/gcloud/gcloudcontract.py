"""Every `gcloud …` command line tpuctl prints (its Python sources) or documents (README.md, docs/*.md), with
placeholders filled, and a runner that puts them through the installed Google Cloud CLI.

Sources:
- Python: every string and f-string of tpuctl/, bootstrap/, infra/, policy/ (not docstrings) that contains
  ``gcloud ``: doctor and pre-flight fix lines, error hints, dry-run notes, the TPU VM startup script. An
  f-string's fields are filled from EXPRESSION_SAMPLES (by the field's source text); a field inside a command
  with no sample is a collection error, so a new printed command cannot slip past unchecked.
- Markdown: inline code spans and fenced code lines starting with ``gcloud ``.

A *reference* names a command without running it (`gcloud iam roles describe`, `gcloud services enable … --project
P`): only its command path is checked (``--help``) and its flags must appear in that help. Everything else is an
*invocation*: run as written, it must get past gcloud's parser and validation and stop at the missing account.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ground.envs import OPS_PACKAGES

REPO = Path(__file__).resolve().parents[3]
PYTHON_TREES = OPS_PACKAGES
GCLOUD_BINARY = "/usr/bin/gcloud"

#: Values for the f-string fields that appear inside printed commands, by the field's source text.
EXPRESSION_SAMPLES: dict[str, str] = {
    "project": "my-project-1",
    "job.project": "my-project-1",
    "zone": "us-central1-a",
    "region": "us-central1",
    "job.region": "us-central1",
    "service": "aiplatform.googleapis.com",
    "self.service": "tpu.googleapis.com",
    "repository": "team-images",
    "member": "serviceAccount:tpuctl-trainer@my-project-1.iam.gserviceaccount.com",
    "email": "tpuctl-trainer@my-project-1.iam.gserviceaccount.com",
    "email.split('@')[0]": "tpuctl-trainer",
    "role": "roles/storage.objectViewer",
    "staging": "tpuctl-my-project-1-staging",
    "quota_id": "CustomModelTrainingT4GPUsPerProjectPerRegion",
    "need": "8",
    "count": "16",
    "' '.join(missing)": "tpu.googleapis.com cloudquotas.googleapis.com",
    "shown": "gs://tpuctl-my-project-1-data/a.tfrecord gs://tpuctl-my-project-1-data/b.tfrecord",
    "shell_word(registry_host(run))": "us-central1-docker.pkg.dev",
    "host_report(run)": "gs://tpuctl-my-project-1-artifacts/runs/r1/tpuctl/hosts/worker-0.exit",
    # the startup script's failure line (script.failure_logger): the log, the JSON entry "$entry" holds, the project
    "STARTUP_LOG": "tpuctl-startup",
    "ENTRY": shlex.quote('{"message": "tpuctl: the trainer container did not start (exit 125): docker: Error '
                         'response from daemon: pull access denied", "container": {"metadata": {"tpuctl_run": "r1", '
                         '"tpuctl_worker": "0"}}}'),
    "shell_word(run.project or '')": "my-project-1",
    "dims": "zone=us-central1-a",
    "where": "gs://tpuctl-my-project-1-data/datasets/flowers",
}
#: Placeholders the docs and messages write in capitals (whole words only).
WORD_SAMPLES: dict[str, str] = {
    "P": "my-project-1", "PROJECT": "my-project-1", "Z": "us-central1-a", "ZONE": "us-central1-a",
    "REGION": "us-central1", "NAME": "tpuctl-run-1", "R": "team-images",
    "AGENT": "service-123@gcp-sa-tpu.iam.gserviceaccount.com", "ROLE": "roles/cloudtpu.serviceAgent",
    "MEMBER": "serviceAccount:tpuctl-trainer@my-project-1.iam.gserviceaccount.com",
    "YOUR_EMAIL": "you@example.com", "ENTRY": '{"message": "tpuctl: the trainer container did not start (exit 125)"}', "URL": "gs://tpuctl-my-project-1-artifacts/runs/r1/model", "DIR": "/tmp/model",
}
#: `gcloud` text that is not a command to check, with the reason.
NOT_COMMANDS: dict[str, str] = {
    "gcloud if you mean to": "prose: 'delete it with gcloud if you mean to' (tpuctl/services/runs/tpuvm/manage.py)",
    "gcloud ai-platform jobs submit training --scale-tier BASIC_TPU":
        "the seeds' command, quoted as what AI Platform's shutdown replaced (docs/vertex.md)",
    "gcloud ai-platform jobs submit training --scale-tier BASIC_TPU / BASIC_GPU":
        "the seeds' command, quoted as history (docs/seeds-vs-today.md)",
}
#: Where a command ends inside a message.
_END = re.compile(r"`|\)|\s\(|;|\n|\"|'(?=\s|$)")
_FIELD = re.compile(r"\x00(\d+)\x00")
_REFERENCE_TOKEN = re.compile(r"^(?:-{1,2}[a-z][a-z0-9-]*|[a-z][a-z0-9-]*|…)$")


@dataclass(frozen=True)
class Command:
    where: str          # file:line
    text: str           # as printed or documented, fields filled
    argv: tuple[str, ...]   # after `gcloud`, placeholders filled
    reference: bool

    @property
    def path(self) -> tuple[str, ...]:
        """The command path of a reference (the words before the first flag or '…')."""
        out = []
        for token in self.argv:
            if token.startswith("-") or token == "…":
                break
            out.append(token)
        return tuple(out)

    @property
    def flags(self) -> tuple[str, ...]:
        return tuple(t.split("=", 1)[0] for t in self.argv if t.startswith("--"))


class CollectionError(Exception):
    pass


def _fill_words(token: str) -> str:
    return re.sub(r"(?<![A-Za-z0-9_])([A-Z][A-Z_]*)(?![A-Za-z0-9_])",
                  lambda m: WORD_SAMPLES.get(m.group(1), m.group(1)), token)


def _command(where: str, text: str, template: str | None = None) -> Command | None:
    """``text``: the command as printed; ``template``: the same before its f-string fields were filled (a
    field is an argument, so a printed command with one is an invocation, never a reference)."""
    text = " ".join(text.split())
    if text in NOT_COMMANDS:
        return None
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise CollectionError(f"{where}: {text!r} does not split like a shell line ({exc})") from None
    if words[:1] != ["gcloud"]:
        raise CollectionError(f"{where}: {text!r} does not start with gcloud")
    rest = words[1:]
    raw = (template or text).split()[1:]
    reference = "…" in rest or all(_REFERENCE_TOKEN.match(w) for w in raw)
    return Command(where, text, tuple(_fill_words(w) for w in rest), reference)


def _spans(text: str) -> list[str]:
    """The `gcloud …` command lines in one rendered message (fields marked \\x00N\\x00)."""
    out = []
    for m in re.finditer(r"(?:(?<=^)|(?<=[\s`(|]))gcloud ", text):
        end = _END.search(text, m.start())
        out.append(text[m.start():end.start() if end else len(text)].rstrip(" .,:"))
    return out


def _sample(expression: str) -> str | None:
    """The sample for an f-string field: EXPRESSION_SAMPLES, or the real value of a ``domain.NAME`` string."""
    if expression in EXPRESSION_SAMPLES:
        return EXPRESSION_SAMPLES[expression]
    if re.fullmatch(r"domain\.[A-Z_]+", expression):
        from ground import domain

        value = getattr(domain, expression.split(".", 1)[1], None)
        return value if isinstance(value, str) else None
    return None


def _docstring_ids(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                ids.add(id(first.value))
    return ids


def printed_commands() -> list[Command]:
    """Commands in tpuctl's Python sources (see the module docstring)."""
    found: list[Command] = []
    for top in PYTHON_TREES:
        for path in sorted((REPO / top).rglob("*.py")):
            where_file = str(path.relative_to(REPO))
            tree = ast.parse(path.read_text(), filename=where_file)
            skip = _docstring_ids(tree)
            parts = {id(v) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for v in node.values}
            for node in ast.walk(tree):
                if id(node) in skip or id(node) in parts:
                    continue
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    rendered, fields = node.value, []
                elif isinstance(node, ast.JoinedStr):
                    fields = [ast.unparse(v.value) for v in node.values if isinstance(v, ast.FormattedValue)]
                    pieces, n = [], 0
                    for v in node.values:
                        if isinstance(v, ast.Constant):
                            pieces.append(str(v.value))
                        else:
                            pieces.append(f"\x00{n}\x00")
                            n += 1
                    rendered = "".join(pieces)
                else:
                    continue
                if "gcloud " not in rendered:
                    continue
                where = f"{where_file}:{node.lineno}"
                for span in _spans(rendered):
                    missing = [fields[int(i)] for i in _FIELD.findall(span) if _sample(fields[int(i)]) is None]
                    if missing:
                        raise CollectionError(f"{where}: add a sample for {missing} to EXPRESSION_SAMPLES "
                                              f"(in {span!r})")
                    filled = _FIELD.sub(lambda m, fields=fields: _sample(fields[int(m.group(1))]) or "", span)
                    command = _command(where, filled, span)
                    if command is not None:
                        found.append(command)
    return found


def rendered_commands() -> list[Command]:
    """The fix lines as the functions that print them render them, with real values (not the source scan)."""
    from bootstrap import principals, quotas
    from ground import domain
    from ground.outputs import parse_outputs

    from runfixtures import planned

    project, zone, region = "my-project-1", "us-central1-a", "us-central1"
    sa = f"tpuctl-trainer@{project}.iam.gserviceaccount.com"
    texts = [(f"domain.SERVICE_AGENTS[{k!r}].create_command", domain.SERVICE_AGENTS[k].create_command(project, zone))
             for k in ("tpu-agent", "tpu-vm-agent")]
    texts.append(("principals.role_command", principals.role_command(project, sa, "roles/cloudtpu.serviceAgent")))
    texts.append(("quotas.tpu_vm_quota_fix", quotas.tpu_vm_quota_fix(
        project, zone, domain.TPU_VM_QUOTAS["v5e"].spot or "", "v5e", 16, True)))
    outputs = parse_outputs({"project": project, "region": region,
                             "buckets": {"data": "d-bucket", "staging": "s-bucket", "artifacts": "a-bucket"},
                             "trainer_image_repository": "team-images"})
    job = planned("vertex", outputs, accelerator="gpu-t4x2", name="j1")
    metric, need = domain.job_quota_need(job.accelerator, job.workers)
    texts.append(("quotas.vertex_quota_fix", quotas.vertex_quota_fix(
        project, region, job.accelerator, metric, "CustomModelTrainingT4GPUsPerProjectPerRegion", need)))
    found = []
    for where, text in texts:
        spans = _spans(text)
        if not spans:
            raise CollectionError(f"{where} rendered no gcloud command: {text!r}")
        found += [c for c in (_command(f"rendered {where}", span) for span in spans) if c is not None]
    return found


def documented_commands() -> list[Command]:
    """Commands in README.md and docs/*.md: inline code spans and fenced code lines."""
    found: list[Command] = []
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        text = path.read_text()
        name = str(path.relative_to(REPO))
        fenced = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
        blocks = list(fenced.finditer(text))
        for block in blocks:
            body = block.group(1).replace("\\\n", " ")
            for line in body.splitlines():
                line = line.strip().removeprefix("$ ")
                if line.startswith("gcloud "):
                    line = line.split(" #", 1)[0]
                    command = _command(f"{name}:{text.count(chr(10), 0, block.start()) + 1}", line)
                    if command is not None:
                        found.append(command)
        outside = fenced.sub(lambda m: "\n" * m.group(0).count("\n"), text)
        for m in re.finditer(r"`(gcloud [^`]+)`", outside):
            command = _command(f"{name}:{outside.count(chr(10), 0, m.start()) + 1}", m.group(1))
            if command is not None:
                found.append(command)
    return found


# --------------------------------------------------------------------------------------------
# Running them
# --------------------------------------------------------------------------------------------

def sdk_root() -> Path:
    """The Cloud SDK that /usr/bin/gcloud runs (its symlink's target is <sdk>/bin/gcloud)."""
    return Path(os.path.realpath(GCLOUD_BINARY)).parents[1]


def sdk_python() -> str:
    bundled = sdk_root() / "platform" / "bundledpythonunix" / "bin" / "python3"
    return os.environ.get("CLOUDSDK_PYTHON") or (str(bundled) if bundled.exists() else "python3")


def isolated_env(home: Path) -> dict[str, str]:
    """No credentials, no prompts, no usage reports, a config and a HOME of its own (configure-docker writes
    ~/.docker/config.json); gcloud never reaches Google."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CLOUDSDK_", "GOOGLE_", "GCE_")) and k not in {"DOCKER_CONFIG"}}
    env.update({
        "HOME": str(home), "CLOUDSDK_CONFIG": str(home / "gcloud-config"), "DOCKER_CONFIG": str(home / "docker"),
        "CLOUDSDK_CORE_DISABLE_PROMPTS": "1", "CLOUDSDK_CORE_DISABLE_USAGE_REPORTING": "true",
        "CLOUDSDK_COMPONENT_MANAGER_DISABLE_UPDATE_CHECK": "true", "CLOUDSDK_CORE_CHECK_GCE_METADATA": "false",
        "CLOUDSDK_SURVEY_DISABLE_PROMPTS": "1", "TPUCTL_GCLOUD_SDK": str(sdk_root()), "NO_BROWSER": "1",
    })
    return env


def run_batch(argvs: list[list[str]], timeout: float = 120.0) -> list[dict]:
    """Each argv through gcloud (one SDK process, gcloud_batch.py): [{argv, code, output, seconds}]."""
    with tempfile.TemporaryDirectory(prefix="tpuctl-gcloud-") as tmp:
        home = Path(tmp)
        source, report = home / "in.json", home / "out.json"
        source.write_text(json.dumps(argvs))
        proc = subprocess.run([sdk_python(), str(Path(__file__).with_name("gcloud_batch.py")), str(source),
                               str(report)], env=isolated_env(home), stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0 or not report.exists():
            raise RuntimeError(f"gcloud_batch failed ({proc.returncode}): {proc.stderr[-2000:]}")
        return json.loads(report.read_text())


def run_binary(argv: list[str], timeout: float = 60.0) -> tuple[int, str]:
    """One argv through the real /usr/bin/gcloud (a process of its own, isolated the same way)."""
    with tempfile.TemporaryDirectory(prefix="tpuctl-gcloud-") as tmp:
        proc = subprocess.run([GCLOUD_BINARY, *argv], env=isolated_env(Path(tmp)), stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=timeout)
        return proc.returncode, proc.stdout + proc.stderr


NO_ACCOUNT = "You do not currently have an active account selected"
#: A rule gcloud applies only after it has read the TPU from the API, so it cannot be seen offline; copied
#: from the SDK (lib/googlecloudsdk/command_lib/compute/tpus/tpu_vm/ssh.py, Cloud SDK 528, where a node with
#: more than one selected worker and no --command raises this).
MULTI_WORKER_RULE = "cannot target multiple workers without the `--command` flag."
MULTI_WORKER_RULE_SOURCE = "lib/googlecloudsdk/command_lib/compute/tpus/tpu_vm/ssh.py"


def offline_rule_violation(command: Command) -> str | None:
    """gcloud's post-API refusals, checked here: ssh/scp to several workers needs --command."""
    argv = command.argv
    if argv[:4] != ("compute", "tpus", "tpu-vm", "ssh"):
        return None
    given = dict(a.split("=", 1) if "=" in a else (a, "") for a in argv if a.startswith("--"))
    worker = given.get("--worker") or next((argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--worker"), "0")
    if (worker.upper() == "ALL" or "," in worker or "-" in worker) and "--command" not in given:
        return f"--worker={worker}: {MULTI_WORKER_RULE}"
    return None


def verdict(command: Command, result: dict) -> str | None:
    """None when gcloud accepts ``command``; else why not (one paragraph, with gcloud's own words)."""
    code, output = result["code"], result["output"].strip()
    if command.reference:
        if code != 0:
            return f"gcloud has no command `gcloud {' '.join(command.path)}` (exit {code}): {output[-600:]}"
        unknown = [f for f in command.flags if f not in output]
        return f"`gcloud {' '.join(command.path)}` has no flag {', '.join(unknown)}" if unknown else None
    rule = offline_rule_violation(command)
    if rule:
        return rule
    if code == 0 or (code == 1 and NO_ACCOUNT in output):
        return None
    return f"gcloud refused it (exit {code}): {output[-600:]}"


def check(commands: list[Command], extra: list[list[str]] = ()) -> tuple[dict, float]:
    """Run every command (references as ``PATH --help``) and the ``extra`` argvs in one batch:
    ({command: verdict, "extra": [raw results of extra]}, seconds spent inside gcloud)."""
    argvs = [[*c.path, "--help"] if c.reference else list(c.argv) for c in commands]
    results = run_batch(argvs + [list(a) for a in extra])
    found: dict = {c: verdict(c, r) for c, r in zip(commands, results)}
    found["extra"] = results[len(commands):]
    return found, sum(r["seconds"] for r in results)


if __name__ == "__main__":        # a quick listing: python tests/ops/gcloud/gcloudcontract.py
    for c in printed_commands() + documented_commands():
        print(f"{'ref' if c.reference else 'run'}  {c.where}  gcloud {' '.join(c.argv)}", file=sys.stdout)
