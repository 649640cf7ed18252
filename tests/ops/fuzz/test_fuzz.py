"""Fuzzing the CLI's edges: argument lists, stack config documents, stack outputs JSON.

The property for every target: a non-zero exit is exactly one ``error: …`` line on stderr (or the help of
a bare group) and never a traceback; the run never touches the network (every Google endpoint points at a
closed local port) and never starts a trainer (the trainer interpreter does not exist). Profiles (examples
per target): ``fuzz`` by default, ``--hypothesis-profile=long`` for a soak run (see conftest.py).
"""

from __future__ import annotations

import json
import math
import os
import socket
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from clifixtures import invoke

REPO = Path(__file__).resolve().parents[3]
SERVICES = ("STORAGE_EMULATOR_HOST", "TPUCTL_CRM_ENDPOINT", "TPUCTL_IAM_ENDPOINT", "TPUCTL_SERVICEUSAGE_ENDPOINT",
            "TPUCTL_CLOUDQUOTAS_ENDPOINT", "TPUCTL_VERTEX_ENDPOINT", "TPUCTL_TPU_ENDPOINT")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens there once the socket is closed


@pytest.fixture(scope="module")
def sealed(tmp_path_factory):
    """(env, folder): every endpoint on a closed port, no trainer, a private cache; cwd-independent paths."""
    tmp = tmp_path_factory.mktemp("fuzz")
    url = f"http://127.0.0.1:{_closed_port()}"
    env = {name: url for name in SERVICES}
    env.update(TPUCTL_TRAINER_PYTHON=str(tmp / "no-trainer" / "python"), TPUCTL_CACHE_DIR=str(tmp / "cache"),
               GOOGLE_CLOUD_PROJECT="fuzz-project-1")
    (tmp / "src" / "cat").mkdir(parents=True)
    (tmp / "a-file").write_text("not a folder")
    return env, tmp


def check(args, result, *, help_ok: bool = False) -> None:
    stderr, stdout = result.stderr, result.stdout
    assert "Traceback" not in stderr and "Traceback" not in stdout, (args, stderr[-2000:])
    if result.exit_code == 0:
        return
    if help_ok and not stderr and "Usage" in stdout:
        return  # a bare group prints its help
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), (args, result.exit_code, stderr[-2000:])


# ------------------------------------------------------------------------------------------------
# Values a hostile user types
# ------------------------------------------------------------------------------------------------

NUMBERS = st.one_of(
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["0", "-1", "1", "64", "65", "30000", "nan", "inf", "-inf", "1e999", "0x10", "", " 1",
                     "9" * 5000, "1_000", "½", "0.0", "1.0", "-0"]),
)
TEXT = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["", "-", "--", "gs://", "gs://Bad_Bucket/x", "gs://ok-bucket", "x" * 5000, "../..", "/",
                     "/dev/null", "serviceAccount:", "serviceAccount:not-an-email", "user:@", "allUsers",
                     "tpu-agent", "training-sa", "a@b.c", "\x00", "é", "tpu-v3-8", "gpu-t4x2", "cpu", "gpu-l4x4"]),
)


def _paths(tmp: Path):
    return st.sampled_from([str(tmp / "src"), str(tmp / "a-file"), str(tmp / "a-file" / "below"), str(tmp / "new"),
                            str(tmp / ("n" * 300)), str(tmp / "/".join(["d" * 200] * 30)), "/no/such/folder",
                            "gs://fuzz-bucket/x", "gs://Bad/x", "", "."])


def _flags(spec: dict[str, st.SearchStrategy], positional: st.SearchStrategy | None = None):
    """Argument lists: a few flags from ``spec`` (flag -> value strategy, None for a switch), in any order."""
    items = st.sampled_from(sorted(spec)).flatmap(
        lambda flag: st.just([flag]) if spec[flag] is None else spec[flag].map(lambda v, f=flag: [f, v]))
    parts = st.lists(items, max_size=6).map(lambda xs: [a for x in xs for a in x])
    if positional is None:
        return parts
    return st.tuples(st.lists(positional, max_size=3), parts).map(lambda t: t[0] + t[1])


def _train_args(tmp: Path):
    spec = {
        "--workers": NUMBERS, "-w": NUMBERS, "--epochs": NUMBERS, "--batch-size": NUMBERS, "--poll-seconds": NUMBERS,
        "--accelerator": TEXT, "--data-dir": _paths(tmp), "--model-dir": _paths(tmp), "--model": TEXT,
        "--hub-handle": TEXT, "--hub-cache-dir": TEXT, "--outputs": _paths(tmp), "--region": TEXT,
        "--name": TEXT, "--image": TEXT, "--no-wait": None, "--stack": TEXT,
    }
    local = _flags({k: v for k, v in spec.items() if k not in ("--no-wait",)})
    # Vertex only ever as a dry run: nothing is uploaded or submitted, even to the closed port.
    vertex = _flags(spec).map(lambda a: ["--target", "vertex", "--dry-run", *a])
    # TPU VMs likewise: a dry run (the quota check meets the closed Cloud Quotas port: a note, not an error)
    tpu_vm = _flags({**spec, "--zone": TEXT, "--spot": None, "--keep": None,
                     "--accelerator": st.one_of(TEXT, st.sampled_from(["v5litepod-16", "v4-8", "v6e-8", "v5p-8"]))}
                    ).map(lambda a: ["--target", "tpu-vm", "--dry-run", *a])
    return st.one_of(local, vertex, tpu_vm).map(lambda a: ["train", *a])


def _data_args(tmp: Path):
    make = _flags({"--shard-mb": NUMBERS, "--validation-fraction": NUMBERS, "--json": None},
                  positional=st.one_of(_paths(tmp), TEXT)).map(lambda a: ["data", "make-tfrecords", *a])
    sample = _flags({"--json": None}, positional=st.one_of(_paths(tmp), TEXT)).map(lambda a: ["data", "sample", *a])
    return st.one_of(make, sample, st.just(["data"]))


def _plan_args(tmp: Path):
    return _flags({"--stack": TEXT, "-s": TEXT, "--config": _paths(tmp), "--json": None, "--no-policy": None,
                   "--bogus": TEXT}).map(lambda a: ["plan", *a])


def _grant_args(tmp: Path):
    return _flags({"--project": TEXT, "--read-bucket": TEXT, "--write-bucket": TEXT, "--principal": TEXT,
                   "--mode": TEXT, "--role": TEXT, "--via": TEXT, "--outputs": _paths(tmp)}).map(
        lambda a: ["grant-access", "--dry-run", *a])


HOSTILE = st.sampled_from(["$(id)", "`id`", "'; id; '", "\x1b]0;x\x07", "[bold]x[/]", "http://[::1",
                           "http://u:p@127.0.0.1:1/v1/models/m:predict", "x;y", "..", "gs://UPPER/x", "/dev/zero",
                           "\xff", "9" * 400, "nan", "-1", "1e400"])
WORDS = st.one_of(TEXT, HOSTILE)


def _serving_args(tmp: Path):
    """serve/deploy/predict only as dry runs or against closed ports: nothing is started or created."""
    refs = st.one_of(_paths(tmp), WORDS)
    serve = _flags({"--model-name": WORDS, "--port": NUMBERS, "--grpc-port": NUMBERS, "--image": WORDS,
                    "--dir": _paths(tmp), "--batching": None}, positional=refs).map(lambda a: ["serve", "--dry-run", *a])
    deploy = _flags({"--model-name": WORDS, "--region": WORDS, "--image": WORDS, "--endpoint": WORDS,
                     "--min-replicas": NUMBERS, "--max-replicas": NUMBERS, "--outputs": _paths(tmp),
                     "--dir": _paths(tmp)}, positional=refs).map(lambda a: ["deploy", "--dry-run", *a])
    predict = _flags({"--timeout": NUMBERS, "--top": NUMBERS, "--batch-size": NUMBERS, "--max-bytes": NUMBERS,
                      "--manifest": st.one_of(_paths(tmp), WORDS), "--json": None},
                     positional=st.one_of(refs, st.just(f"http://127.0.0.1:{_closed_port()}/v1/models/m:predict"))
                     ).map(lambda a: ["predict", *a])
    return st.one_of(serve, deploy, predict)


def _runs_args(tmp: Path):
    common = {"--dir": st.one_of(_paths(tmp), WORDS), "--outputs": _paths(tmp)}
    return st.one_of(
        _flags({**common, "--json": None}).map(lambda a: ["runs", "ls", *a]),
        _flags(common, positional=WORDS).map(lambda a: ["runs", "show", *a]),
        _flags(common, positional=WORDS).map(lambda a: ["runs", "compare", *a]))


def _tune_tpu_args(tmp: Path):
    tune = _flags({"--spec": st.one_of(_paths(tmp), WORDS), "--trials": NUMBERS, "--seed": NUMBERS,
                   "--image": WORDS, "--region": WORDS, "--max-run-time": WORDS, "--outputs": _paths(tmp),
                   "--model-dir": _paths(tmp), "--data-dir": _paths(tmp)}).map(lambda a: ["tune", "--dry-run", *a])
    tpu = _flags({"--project": WORDS, "--zone": WORDS, "--outputs": _paths(tmp), "--json": None}).map(
        lambda a: ["tpu", "list", *a])
    return st.one_of(tune, tpu)


@pytest.mark.parametrize("target", ["train", "data", "plan", "grant-access", "serving", "runs", "tune-tpu"])
def test_cli_arguments(sealed, target):
    env, tmp = sealed
    strategy = {"train": _train_args, "data": _data_args, "plan": _plan_args, "grant-access": _grant_args,
                "serving": _serving_args, "runs": _runs_args, "tune-tpu": _tune_tpu_args}[target](tmp)

    @given(args=strategy)
    def prop(args):
        if target == "plan" and "--stack" not in args and "-s" not in args and "--config" not in args:
            args = [*args, "--stack", "no-such-stack"]  # the example stack's full plan is covered elsewhere
        check(args, invoke(args, env=env), help_ok=True)

    prop()


# ------------------------------------------------------------------------------------------------
# Stack config documents through `tpuctl plan --config FILE`
# ------------------------------------------------------------------------------------------------

EXAMPLE = (REPO / "Pulumi.example.yaml").read_text()
KEYS = ["tpuctl:project", "tpuctl:region", "tpuctl:zone", "tpuctl:accessMode", "tpuctl:principals",
        "tpuctl:stagingRetentionDays", "tpuctl:gpuQuotas", "tpuctl:quotaContactEmail", "tpuctl:labels",
        "tpuctl:hubModels", "tpuctl:bucketPrefix", "gcp:project", "tpuctl:softDeleteDays", "tpuctl:unknown", "x",
        "tpuctl:tpuQuotas", "tpuctl:tpuVmQuotas", "tpuctl:tpuZone", "tpuctl:servingEndpoint"]
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(10**40), max_value=10**40),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=30),
                    st.sampled_from(["us-central1", "us-central1-a", "bucket", "project", "my-tpu-project", "7",
                                     "nvidia-tesla-t4:us-central1:4", "a@b.com", "k=v", "-1", "1e999",
                                     "v5e:us-west4-a:16:spot", "v4:us-central2-b:32:spot", "v5e:us-central1:8",
                                     "us-central2-b", "flowers-serving"]))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(st.text(max_size=8), inner, max_size=3)),
                      max_leaves=8)
RAW_YAML = st.sampled_from([
    "config:\n  tpuctl:project: &a [x, x]\n  tpuctl:labels: *a\n",
    "a: &a [x,x,x,x]\nb: &b [*a,*a,*a]\nc: &c [*b,*b,*b]\nconfig: {tpuctl:labels: *c}\n",
    "config: " + "[" * 3000 + "]" * 3000 + "\n",
    "config: " + "{a: " * 200 + "1" + "}" * 200 + "\n",
    "config:\n  1: x\n", "config:\n  ? [a]\n  : b\n", "config:\n  null: x\n", "config:\n  tpuctl:project: 2020-01-01\n",
    "config:\n  tpuctl:stagingRetentionDays: " + "9" * 5000 + "\n", "config:\n  tpuctl:stagingRetentionDays: .nan\n",
    "config:\n  tpuctl:project: {secure: AAAA}\n", "config: [1, 2]\n", "- just a list\n", "", "config:\n",
    "config: !!python/object:os.system echo\n", "%YAML 1.1\n---\nconfig: {}\n...\n---\nconfig: {}\n", "\t:\n",
])


def _mutated_example():
    import yaml

    base = yaml.safe_load(EXAMPLE)["config"]
    return st.tuples(st.lists(st.sampled_from(KEYS), max_size=4), st.lists(st.tuples(st.sampled_from(KEYS), VALUES),
                                                                          max_size=4)).map(
        lambda t: {"config": {**{k: v for k, v in base.items() if k not in t[0]}, **dict(t[1])}})


def _dump(doc) -> bytes:
    import yaml

    try:
        return yaml.safe_dump(doc, allow_unicode=True).encode()
    except Exception:  # noqa: BLE001 - hypothesis made something PyYAML cannot write: write it as JSON
        return json.dumps(doc, default=str).encode()


STACK_DOCS = st.one_of(
    _mutated_example().map(_dump),
    RAW_YAML.map(str.encode),
    st.binary(max_size=200),
    st.binary(max_size=64).map(lambda b: b"config:\n  tpuctl:project: " + b),
)


def test_stack_config_documents(sealed):
    env, tmp = sealed
    path = tmp / "Pulumi.fuzz.yaml"

    @given(data=STACK_DOCS, policy=st.booleans())
    def prop(data, policy):
        path.write_bytes(data)
        args = ["plan", "--config", str(path), "--json", *([] if policy else ["--no-policy"])]
        result = invoke(args, env=env)
        check(args, result)
        assert result.exit_code in (0, 1, 2), (result.exit_code, result.stderr)
        if result.exit_code == 0:
            json.loads(result.stdout)  # a plan was really printed

    prop()


def test_huge_stack_file_is_refused_unparsed(sealed):
    env, tmp = sealed
    path = tmp / "Pulumi.huge.yaml"
    path.write_bytes(b"config:\n" + b"  # padding\n" * 200_000)
    result = invoke(["plan", "--config", str(path)], env=env)
    check(["plan"], result)
    assert result.exit_code == 2 and "larger than" in result.stderr and str(path) in result.stderr


# ------------------------------------------------------------------------------------------------
# Stack outputs JSON through the commands that take --outputs
# ------------------------------------------------------------------------------------------------

VALID_OUTPUTS = {
    "project": "my-project-1", "project_number": "123456789012", "region": "us-central1", "zone": "us-central1-b",
    "access_mode": "bucket",
    "buckets": {"data": "my-data-bucket", "staging": "my-staging-bucket", "artifacts": "my-artifacts-bucket",
                "hub-cache": "my-hub-bucket"},
    "principals": {"training-sa": "tpuctl-trainer@my-project-1.iam.gserviceaccount.com"},
    "training_service_account": "tpuctl-trainer@my-project-1.iam.gserviceaccount.com",
    "tfhub_cache_dir": "gs://my-hub-bucket/model-cache", "hub_cache_prefix": "model-cache", "hub_models": [],
    "access_map": {}, "labels": {"team": "vision"},
}
JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False),
              st.text(max_size=30)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)),
    max_leaves=8)
RAW_OUTPUTS = st.sampled_from([
    b'{"hub_models": 5}', b"\xff\xfe\x00{", b"[" * 100_000, b'{"project_number": 1e999}', b'{"a": NaN}',
    b'{"project_number": ' + b"9" * 5000 + b"}", b'{"buckets": {"data": "Bad_Bucket"}}', b"[]", b"null", b"",
    b'{"principals": {"training-sa": "not-an-email"}}', b'{"labels": {"a": {"b": 1}}}', b'{"region": 7}',
    b'{"access_map": {"m": {"b": "roles/x"}}}', b'{"buckets": {"data": 5}}', b'{"project_number": true}',
    b" " * 5_000_000,
])


def _mutated_outputs():
    return st.tuples(st.lists(st.sampled_from(sorted(VALID_OUTPUTS)), max_size=3),
                     st.dictionaries(st.sampled_from([*sorted(VALID_OUTPUTS), "extra"]), JSON_VALUES, max_size=3)).map(
        lambda t: json.dumps({**{k: v for k, v in VALID_OUTPUTS.items() if k not in t[0]}, **t[1]}).encode())


OUTPUT_DOCS = st.one_of(_mutated_outputs(), RAW_OUTPUTS, st.binary(max_size=100))


def test_outputs_documents(sealed):
    env, tmp = sealed
    path = tmp / "outputs.json"

    @given(data=OUTPUT_DOCS, command=st.sampled_from(["vertex", "local"]))
    def prop(data, command):
        path.write_bytes(data)
        args = (["train", "--target", "vertex", "--dry-run", "--outputs", str(path)] if command == "vertex"
                else ["train", "--outputs", str(path)])
        result = invoke(args, env=env)
        check(args, result)
        if result.exit_code == 0:
            assert command == "vertex"
            json.loads(result.stdout)

    prop()


def test_sealed_environment_has_no_listener(sealed):
    """The closed port really is closed (else a fuzz run could talk to something)."""
    env, _ = sealed
    host, port = env["TPUCTL_CRM_ENDPOINT"][len("http://"):].split(":")
    with socket.socket() as s:
        assert s.connect_ex((host, int(port))) != 0
    assert not math.isnan(0.0) and os.sep == "/"
