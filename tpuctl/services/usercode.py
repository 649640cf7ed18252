"""The user's project folder that travels with a run (``--code DIR``; docs/your-code.md).

What is sent: every file below the folder except what its ``.gitignore`` and ``.dockerignore`` (at the folder's top)
leave out, what is never code (virtual environments, caches), what never ships whatever the ignore files say
(``.git/`` and the other version-control folders, tpuctl's own run folders: ``runs/`` and any folder a run or a
trial wrote), and secrets, which are left out and named. A secret is recognised by its name, in any case
(``.env``, ``id_rsa``, ``*.pem``, gcloud's token databases …), by the shape of a folder (a copied gcloud
configuration folder), and by its content, at any size and under any name (a private key's PEM or OpenSSH armour, a
service-account key or OAuth user credentials as JSON, an SQLite token database); a symbolic link is judged by its
target as well as by its own name, and a hard link to a secret in the folder is one too. Symbolic links out of the
folder, FIFOs, devices and names that are not UTF-8 are refused (``ground.localtree.scan_tree``); the whole is
bounded in files and bytes, and the walk stops where a bound is passed. Its content hash (paths and bytes, read
once) names the image layer it ships in, so unchanged code is never rebuilt, and the bytes packed into an image are
checked against it; its ``requirements.txt`` is checked against the versions the trainer image pins (TensorFlow,
tf_keras, protobuf …) before anything is built. ``resolve_ref`` checks a ``--model``/``--dataset`` function against
what ships, ``resolve_command`` the file a ``--command`` runs.
"""

from __future__ import annotations

import ast
import base64
import codecs
import contextlib
import hashlib
import os
import posixpath
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

import pathspec
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from ground import domain
from ground.errors import UserError
from ground.files import printable, read_file, read_head
from ground.localtree import TreeFile, scan_tree, shown_name, user_path
from trainer.flags import PLUGIN_REF

#: What a project folder may hold, at the most (the code and small assets: data belongs in a bucket).
MAX_PROJECT_FILES = 5_000
MAX_PROJECT_BYTES = 100 * 1024 * 1024
#: A .gitignore, .dockerignore or requirements.txt is read whole: a few KB, at most this.
MAX_IGNORE_BYTES = 1024 * 1024
#: Never code: left out of every project (an ignore file may bring one back with a ``!`` pattern).
ALWAYS_LEFT_OUT = ["__pycache__/", "*.pyc", ".venv/", "venv/", ".venv-*/", "env/", ".mypy_cache/", ".pytest_cache/",
                   ".ruff_cache/", ".ipynb_checkpoints/", ".DS_Store"]
#: Never shipped, whatever the ignore files say: version control (a token in a remote's URL, the whole history) and
#: tpuctl's own folders (runs: checkpoints and exports; the hub cache). Matched in any case.
NEVER_SHIPPED = [".git", ".hg", ".svn", ".tpuctl-cache", "/runs"]
#: A folder holding one of these is a run's, a trial's or a training trainer's (records.RUN_FILE,
#: tuning.local.TRIAL_FILE, trainer.task.LOCK_FILE; tests/ops/train/test_your_code.py checks they agree).
RUN_MARKERS = ("tpuctl-run.json", "tpuctl-trial.json", ".tpuctl-train.lock")
#: Files and folders whose name says credentials: left out, and named. Matched in lower case.
SECRET_PATTERNS = [".env", ".env.*", "*.env", ".envrc", "*.pem", "*.key", "*.p12", "*.pfx", "*.jks", "*.keystore", "*.ppk",
                   "id_rsa*", "id_dsa*", "id_ecdsa*", "id_ed25519*", "*_rsa", "*_ecdsa", "*_ed25519",
                   ".netrc", "_netrc", ".pypirc", ".git-credentials", ".pgpass", ".boto", ".s3cfg", ".npmrc",
                   "credentials.json", "*credentials*.json", "*service-account*.json",
                   "*serviceaccount*.json", "*service_account*.json",
                   ".aws/", ".ssh/", ".gnupg/", ".docker/", ".kube/", ".azure/", ".config/gcloud/",
                   *domain.GCLOUD_CREDENTIAL_FILES, *(f"{name}/" for name in domain.GCLOUD_CREDENTIAL_FOLDERS)]
#: A folder with one of these at its top is a copy of gcloud's configuration folder (~/.config/gcloud): the whole
#: folder is left out (its token databases, its accounts' credentials, its configurations).
GCLOUD_FOLDER_SHAPE = (*domain.GCLOUD_CREDENTIAL_FILES[:2], *domain.GCLOUD_CREDENTIAL_FOLDERS)
#: What a secret's bytes look like, wherever they are in a file: ``what it is -> patterns``, every one of which
#: the file holds (a PEM, OpenSSH or PuTTY private key's armour, RFC 7468; a service-account key's or OAuth user
#: credentials' JSON fields and the tables of gcloud's SQLite token databases: ground/domain/credentials.py).
_SIGNS: dict[str, tuple[re.Pattern[bytes], ...]] = {
    "a private key": (re.compile(rb"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|PuTTY-User-Key-File-\d"),),
    "a service-account key": (re.compile(rb'"type"\s*:\s*"' + domain.SERVICE_ACCOUNT_TYPE.encode() + rb'"'),),
    "a private key in JSON": (re.compile(rb'"' + domain.PRIVATE_KEY_FIELD.encode() + rb'"\s*:\s*"'),),
    "OAuth user credentials": tuple(re.compile(rb'"' + field.encode() + rb'"\s*:')
                                    for field in domain.USER_CREDENTIAL_FIELDS[:2]),
    "a token database": (re.compile(rb"\ASQLite format 3\x00"),
                         re.compile(rb"CREATE TABLE[^(]{0,40}\b(?:"
                                    + b"|".join(t.encode() for t in domain.GCLOUD_TOKEN_TABLES) + rb")\b", re.I)),
}
REQUIREMENTS = "requirements.txt"
#: TensorFlow's distributions: an image has one of them.
_TENSORFLOW = ("tensorflow", "tensorflow-cpu", "tensorflow-tpu", "tensorflow-gpu", "tensorflow-intel")
#: What the trainer image pins and a project may not move (the image installs its lock with --no-deps).
PINNED = ("tensorflow", "tensorflow-cpu", "tensorflow-tpu", "tf-keras", "keras", "protobuf", "numpy", "libtpu",
          "tensorflow-hub", "tensorboard", "google-crc32c", "jax", "jaxlib", "jax-cuda12-plugin", "jax-cuda12-pjrt",
          "ml-dtypes")
#: A plug-in module's source is parsed to find the function it names: at most this much.
MAX_PLUGIN_SOURCE_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class Project:
    """A scanned project folder: the files that ship (each with the sha256 of the bytes read), the ones left out as
    secrets, and its content hash."""
    root: Path
    files: tuple[TreeFile, ...]
    secrets: tuple[str, ...]
    hashes: dict[str, str] = field(default_factory=dict, compare=False)

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def requirements(self) -> TreeFile | None:
        return next((f for f in self.files if f.rel == REQUIREMENTS), None)

    def digest(self) -> str:
        """sha256 over every shipped file's path and the sha256 of its bytes (the order is the paths')."""
        h = hashlib.sha256()
        for f in self.files:
            h.update(f.rel.encode() + b"\0" + (self.hashes.get(f.rel) or _sha256(self.read(f))).encode() + b"\0")
        return h.hexdigest()

    def read(self, f: TreeFile) -> bytes:
        """The bytes of the shipped file ``f``, as they were when the folder was scanned: a file changed (or swapped
        for a FIFO or a key) since is one line, never packed."""
        where = f"--code {self.root}: {shown_name(f.rel)}"
        data = read_file(f.path, where, f.size, hint="it changed since the folder was scanned; run again")
        expected = self.hashes.get(f.rel)
        if len(data) != f.size or (expected is not None and _sha256(data) != expected):
            raise UserError(f"{where} changed while the image was being made; run again")
        return data


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _spec(lines: list[str]) -> pathspec.PathSpec:
    return pathspec.PathSpec.from_lines("gitignore", lines)


def _ignore_lines(root: Path, name: str) -> list[str]:
    path = root / name
    if not path.is_file():
        return []
    # bounded and never blocking (ground.files): an ignore file is a few lines, a 5 GB one is not read whole
    text = read_file(path, f"--code {root}: {name}", MAX_IGNORE_BYTES, hint="an ignore file is a list of patterns")
    return text.decode("utf-8", "replace").splitlines()[:10_000]


#: A PEM block written in base64 once more (a Kubernetes secret's ``tls.key: LS0tLS1CRUdJTi…``): "-----BEGIN".
_BASE64_ARMOUR = re.compile(rb"LS0tLS1CRUdJTi[A-Za-z0-9+/]{40,}")


def secret_kind(data: bytes) -> str | None:
    """What secret ``data`` (a file's bytes) holds, by the ``_SIGNS`` it carries; None for none. Text in UTF-16 (a
    byte-order mark) is searched as UTF-8; a PEM block encoded in base64 once more is decoded and searched too, and a file with NUL bytes (UTF-16 without a
    byte-order mark) is searched without them."""
    if data[:2] in (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE):
        data = data.decode("utf-16", "replace").encode("utf-8", "replace")
    found = next((kind for kind, patterns in _SIGNS.items() if all(p.search(data) for p in patterns)), None)
    if found is None and b"\x00" in data and not data.startswith(b"SQLite format 3\x00"):
        # UTF-16 without its byte-order mark, or text padded with NULs: the same signs with the NULs left out
        found = secret_kind(data.replace(b"\x00", b""))
    if found is None:
        for match in _BASE64_ARMOUR.finditer(data):
            head = base64.b64decode(match.group()[:64])           # 64 base64 characters: the first 48 bytes
            if _SIGNS["a private key"][0].search(head):
                return "a private key (in base64)"
    return found


def _read_scanned(f: TreeFile, where: str) -> bytes:
    """A file the scan found, read whole and non-blocking (``ground.files.read_head``): one swapped for a FIFO, a
    folder or a larger file since is one line, never waited on."""
    data = read_head(f.path, where, f.size, folder_hint="it changed while the folder was scanned; run again",
                     missing_hint="it was removed while the folder was scanned; run again")
    if len(data) != f.size:
        raise UserError(f"{where} changed while the folder was scanned; run again")
    return data


def scan_project(folder: str | Path) -> Project:
    """The project folder ``folder`` as it would ship (see the module docstring); one UserError line otherwise."""
    root = user_path(str(folder), "--code folder")
    if not root.is_dir():
        raise UserError(f"--code {printable(str(folder), 200)} is not a folder (your project: the folder with your "
                        "model, dataset or script)")
    never = _spec(NEVER_SHIPPED)
    ignored = _spec(ALWAYS_LEFT_OUT + _ignore_lines(root, ".gitignore") + _ignore_lines(root, ".dockerignore"))
    secret = _spec(SECRET_PATTERNS)
    secrets: list[str] = []
    secret_files: set[tuple[int, int]] = set()     # (device, inode) of the files left out as secrets

    def run_folder(path: Path) -> bool:
        return any(os.path.lexists(path / marker) for marker in RUN_MARKERS)

    def gcloud_folder(path: Path) -> bool:
        return any(os.path.lexists(path / name) for name in GCLOUD_FOLDER_SHAPE)

    def skip(rel: str, is_folder: bool, hops: tuple[str, ...] | None) -> bool:
        for name in (rel, *(hops or ())):
            path = name + "/" if is_folder else name
            low = path.lower()
            if never.match_file(low) or is_folder and run_folder(root / name):
                return True
            if ignored.match_file(path):
                return True
            if secret.match_file(low) or is_folder and gcloud_folder(root / name):
                secrets.append(rel if name == rel else f"{rel} (-> {name})")
                if not is_folder:
                    with contextlib.suppress(OSError):
                        st = os.stat(root / name)
                        secret_files.add((st.st_dev, st.st_ino))
                return True
        return False

    files = scan_tree(root, f"--code {root}", skip=skip, max_files=MAX_PROJECT_FILES, max_bytes=MAX_PROJECT_BYTES,
                      bound_hint=": ship the code, keep data in a bucket (--data-dir gs://…), or leave files out "
                                 "with a .dockerignore")
    kept, hashes = [], {}
    for f in files:
        where = f"--code {root}: {shown_name(f.rel)}"
        try:
            st = os.stat(f.path)
        except OSError:
            st = None
        if st is not None and stat.S_ISREG(st.st_mode) and (st.st_dev, st.st_ino) in secret_files:
            secrets.append(f"{f.rel} (a link to a secret)")
            continue
        data = _read_scanned(f, where)
        if secret_kind(data) is not None:
            secrets.append(f.rel)
            continue
        kept.append(f)
        hashes[f.rel] = _sha256(data)
    if not any(f.rel.endswith(".py") for f in kept):
        raise UserError(f"--code {root} has no Python file to run (after .gitignore/.dockerignore)")
    return Project(root, tuple(kept), tuple(sorted(set(secrets))), hashes)


def resolve_ref(project: Project, ref: str, flag: str) -> str:
    """A ``--model``/``--dataset`` function (``path/to/file.py:NAME`` or ``package.module:NAME``, trainer.plugin) as
    the image sees it (relative to the project folder, which the image holds at ``/opt/tpuctl/code``), checked
    against what ships: the file inside the folder (an absolute path inside it is made relative), shipped (not left
    out by an ignore file or as a secret), a Python file that compiles and binds ``NAME`` at its top level (a
    ``def``, a class, an assignment or an import; a ``from … import *`` or a module ``__getattr__`` is taken on
    trust). A module is one of the folder's (``pkg/mod.py`` or ``pkg/mod/__init__.py``) or the distribution of a
    requirement in its ``requirements.txt``. Anything else is one UserError line, before anything is created."""
    match = PLUGIN_REF.match(ref or "")
    if not match:
        raise UserError(f"{flag} {printable(ref, 120)!r}: name a function as path/to/file.py:NAME or "
                        "package.module:NAME")
    where, name = match["where"], match["name"]
    shown = printable(ref, 200)
    shipped = {f.rel: f for f in project.files}
    if where.endswith(".py"):
        rel = _inside_project(project.root, where)
        if rel is None:
            raise UserError(f"{flag} {shown}: {printable(where, 200)} is outside --code {project.root}; the image "
                            "holds that folder only: move the file into it (or pass --code a folder that holds it)")
        candidates = [rel]
    else:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", where):
            raise UserError(f"{flag} {shown}: {printable(where, 120)!r} is neither a .py file nor a module name")
        base = where.replace(".", "/")
        candidates = [f"{base}.py", f"{base}/__init__.py"]
        if not any(c in shipped or os.path.lexists(project.root / c) for c in candidates):
            top = canonicalize_name(where.split(".", 1)[0])
            if top in _required_names(project):
                return ref                      # a module of a distribution the image installs from requirements.txt
            raise UserError(f"{flag} {shown}: no module {where} in --code {project.root} ({candidates[0]} or "
                            f"{candidates[1]}), and no requirement in its {REQUIREMENTS} provides it; the image "
                            "holds that folder and those requirements only")
    rel = next((c for c in candidates if c in shipped), None)
    if rel is None:
        rel = next((c for c in candidates if os.path.lexists(project.root / c)), candidates[0])
        raise UserError(f"{flag} {shown}: {printable(rel, 200)} in --code {project.root} {_not_shipped(project, rel)}")
    f = shipped[rel]
    if f.size > MAX_PLUGIN_SOURCE_BYTES:
        raise UserError(f"{flag} {shown}: {printable(rel, 200)} is larger than {MAX_PLUGIN_SOURCE_BYTES // 2**20} "
                        "MiB; a plug-in module is source code")
    source = project.read(f)
    try:
        tree = ast.parse(source, filename=rel)
    except SyntaxError as exc:
        raise UserError(f"{project.root / rel}:{exc.lineno}: {flag} {shown} does not compile: {exc.msg}") from None
    except ValueError:              # a NUL byte in the source
        raise UserError(f"{project.root / rel}: {flag} {shown} is not Python source (it holds a NUL byte)") from None
    bound, open_ended = _top_level_names(tree.body)
    if name not in bound and not open_ended:
        raise UserError(f"{project.root / rel}: {flag} {shown}: the module defines no {name} at its top level")
    return f"{rel}:{name}" if where.endswith(".py") else ref


def keras_of(project: Project, ref: str) -> str | None:
    """Which Keras the module of a ``--model`` function (as ``resolve_ref`` returned it) imports: ``tf_keras`` when
    it imports tf_keras (or TensorFlow's ``tf.keras`` by name) and not Keras 3, ``keras`` when it imports Keras 3,
    None when it imports neither or is not one of the folder's files (a module of a requirement)."""
    match = PLUGIN_REF.match(ref or "")
    if not match:
        return None
    where = match["where"]
    candidates = [where] if where.endswith(".py") else [f"{where.replace('.', '/')}.py",
                                                        f"{where.replace('.', '/')}/__init__.py"]
    f = next((f for f in project.files if f.rel in candidates), None)
    if f is None or f.size > MAX_PLUGIN_SOURCE_BYTES:
        return None
    try:
        tree = ast.parse(project.read(f))
    except (SyntaxError, ValueError):
        return None
    modules: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules.add(node.module)
            modules.update(f"{node.module}.{alias.name}" for alias in node.names)
    tops = {m.split(".", 1)[0] for m in modules}
    if "keras" in tops:
        return "keras"
    if "tf_keras" in tops or any(m.startswith("tensorflow.keras") for m in modules):
        return "tf_keras"
    return None


def _not_shipped(project: Project, rel: str) -> str:
    """Why the folder's ``rel`` is not in the image."""
    if any(s == rel or s.startswith(f"{rel} ") for s in project.secrets):
        return "is left out of the image as a secret"
    if os.path.lexists(project.root / rel):
        return "is left out of the image (an ignore file, or a folder that never ships)"
    return "does not exist"


#: ``python``, ``python3``, ``python3.11``: an interpreter whose first word that is no option is the script it runs
_PYTHON = re.compile(r"python(\d+(\.\d+)?)?")
#: python's options that take the next word as their value (``-W ignore``, ``-X dev``)
_PYTHON_VALUED = frozenset({"-W", "-X", "-Q"})
_SHELLS = frozenset({"sh", "bash", "dash", "zsh"})


def resolve_command(project: Project, program: tuple[str, ...] | list[str]) -> None:
    """The file a ``--command`` runs, checked against what ships (the program runs in the image's copy of the
    folder, so a script outside it, left out or missing fails only after machines are provisioned): ``python
    FILE``, ``python -m MODULE`` where the folder holds MODULE's package, ``bash FILE``, ``./FILE``. A path inside
    the folder given as an absolute path is refused (the image holds the folder elsewhere); programs on the image's
    PATH, ``-c`` code and modules the folder does not hold are taken on trust. One UserError line, before anything
    is created."""
    head, words = os.path.basename(program[0]), iter(program[1:])
    script = module = None
    if _PYTHON.fullmatch(head) or head in _SHELLS:
        for word in words:
            if word in ("-c", "-"):
                return
            if _PYTHON.fullmatch(head) and word in _PYTHON_VALUED:
                next(words, None)
            elif _PYTHON.fullmatch(head) and word.startswith("-m"):
                module = word[2:] or next(words, None)
                break
            elif not word.startswith("-"):
                script = word
                break
    elif "/" in program[0]:
        script = program[0]
    shown = printable(" ".join(program), 120)
    if script is not None:
        rel = _inside_project(project.root, script)
        if os.path.isabs(script):
            if rel is not None:
                raise UserError(f"--command {shown!r}: {printable(script, 200)} is inside --code {project.root}; "
                                "name it relative to that folder, which the program runs in (the image holds the "
                                "folder at another path)")
            return                      # a program of the image's own
        if rel is None:
            raise UserError(f"--command {shown!r}: {printable(script, 200)} is outside --code {project.root}; the "
                            "image holds that folder only: move the file into it")
        if rel not in {f.rel for f in project.files}:
            raise UserError(f"--command {shown!r}: {printable(rel, 200)} in --code {project.root} "
                            f"{_not_shipped(project, rel)}")
    elif module and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", module):
        base = module.replace(".", "/")
        if not os.path.lexists(project.root / base.split("/", 1)[0]) and \
                not os.path.lexists(project.root / f"{base.split('/', 1)[0]}.py"):
            return                      # a module of the image's environment (pip, a requirement's)
        candidates = [f"{base}.py", f"{base}/__main__.py"]
        shipped = {f.rel for f in project.files}
        if not any(c in shipped for c in candidates):
            rel = next((c for c in candidates if os.path.lexists(project.root / c)), candidates[0])
            raise UserError(f"--command {shown!r}: {printable(rel, 200)} in --code {project.root} "
                            f"{_not_shipped(project, rel)}")


def _inside_project(root: Path, where: str) -> str | None:
    """``where`` (a path given with a plug-in reference) as a path relative to the project folder ``root``; None
    when it leads outside (``..``, an absolute path elsewhere, a link out)."""
    if "\\" in where:
        return None
    path = Path(where) if os.path.isabs(where) else root / where
    real_root = Path(os.path.realpath(root))
    real = Path(os.path.realpath(path.parent)) / path.name    # the file itself may be a link inside (it ships)
    try:
        rel = real.relative_to(real_root).as_posix()
    except ValueError:
        return None
    return None if rel in (".", "") or rel.startswith("../") else posixpath.normpath(rel)


def _required_names(project: Project) -> set[str]:
    """The canonical names of the requirements the project's requirements.txt lists (what the image installs)."""
    req = project.requirements
    if req is None:
        return set()
    names = set()
    for raw in project.read(req).decode("utf-8", "replace").splitlines():
        line = raw.split(" #", 1)[0].strip()
        with contextlib.suppress(InvalidRequirement):
            if line and not line.startswith(("#", "-")):
                names.add(canonicalize_name(Requirement(line).name))
    return names


def _top_level_names(body: list[ast.stmt]) -> tuple[set[str], bool]:
    """The names a module's top level binds (into ``if``/``try``/``with``/``for`` blocks, not into functions and
    classes), and whether it may bind others no parser sees (``from … import *``, a module ``__getattr__``,
    ``globals()``)."""
    names: set[str] = set()
    open_ended = False
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            open_ended |= node.name == "__getattr__"
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name == "*":
                    open_ended = True
                else:
                    names.add(alias.asname or alias.name.split(".", 1)[0])
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.For, ast.AsyncFor, ast.With,
                               ast.AsyncWith)):
            targets = (node.targets if isinstance(node, ast.Assign) else
                       [item.optional_vars for item in node.items if item.optional_vars is not None]
                       if isinstance(node, (ast.With, ast.AsyncWith)) else [node.target])
            for target in targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        if isinstance(node, (ast.If, ast.Try, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith)) or (
                hasattr(ast, "TryStar") and isinstance(node, ast.TryStar)):
            blocks = [node.body, getattr(node, "orelse", []), getattr(node, "finalbody", [])]
            blocks += [h.body for h in getattr(node, "handlers", [])]
            for block in blocks:
                inner, more = _top_level_names(block)
                names |= inner
                open_ended |= more
        if any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("globals", "setattr", "exec")
               for n in ast.walk(node) if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))):
            open_ended = True
    # a walrus at the top level binds too
    names.update(n.target.id for stmt in body for n in ast.walk(stmt)
                 if isinstance(n, ast.NamedExpr) and isinstance(n.target, ast.Name))
    return names, open_ended


def pinned_versions(lock: Path) -> dict[str, str]:
    """``name -> version`` of the pinned packages in a lock file (``name==version`` lines)."""
    out = {}
    for line in lock.read_text().splitlines():
        name, sep, version = line.strip().partition("==")
        if sep and canonicalize_name(name) in PINNED:
            out[canonicalize_name(name)] = version.split(";")[0].strip()
    return out


def check_requirements(project: Project, lock: Path) -> list[str]:
    """The project's ``requirements.txt`` as ``pip install -r`` will read it in the image, checked: plain
    requirements only (no options, URLs or local paths), none that moves a version the image pins. Returns the
    requirement lines."""
    req = project.requirements
    if req is None:
        return []
    pins = pinned_versions(lock)
    lines = []
    if req.size > MAX_IGNORE_BYTES:
        raise UserError(f"--code {project.root}: {REQUIREMENTS} is larger than {MAX_IGNORE_BYTES} bytes; a "
                        "requirements file is a list of packages")
    text = project.read(req).decode("utf-8", "replace")
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        where = f"{project.root / REQUIREMENTS}:{number}"
        if line.startswith("-") or "://" in line or line.startswith((".", "/")):
            raise UserError(f"{where}: {printable(line, 100)}: only plain requirements (name and versions) are "
                            "installed into the image; options, URLs and local paths are not")
        try:
            parsed = Requirement(line)
        except InvalidRequirement as exc:
            raise UserError(f"{where}: {printable(line, 100)} is not a requirement ({exc})") from None
        name = canonicalize_name(parsed.name)
        pinned = pins.get(name)
        if name in _TENSORFLOW and pinned is None:
            image_tf = next(((n, v) for n, v in pins.items() if n in _TENSORFLOW), None)
            if image_tf is not None:       # another TensorFlow distribution would be installed beside the image's
                raise UserError(f"{where}: {printable(line, 100)}: the trainer image provides TensorFlow as "
                                f"{image_tf[0]}=={image_tf[1]}; drop {name} from {REQUIREMENTS}")
        if pinned is not None and not parsed.specifier.contains(pinned, prereleases=True):
            raise UserError(f"{where}: {printable(line, 100)} conflicts with the trainer image's {name}=={pinned}; "
                            f"drop it or allow {pinned} (the image's framework stack is pinned: {lock.name})")
        if parsed.marker is None or parsed.marker.evaluate({"python_version": "3.11", "sys_platform": "linux"}):
            lines.append(line)
    return lines
