"""The user's project folder that travels with a run (``--code DIR``; docs/your-code.md).

What is sent: every file below the folder except what git's ignore files (every ``.gitignore`` in the folder, each
matching relative to its own folder, and ``.git/info/exclude``, with git's precedence) and the ``.dockerignore`` at
its top leave out, what is never code (virtual environments, caches), what never ships whatever the ignore files say
(``.git/`` and the other version-control folders, tpuctl's own run folders: ``runs/`` and any folder a run or a
trial wrote), and secrets, which are left out and named. A secret is recognised by its name, in any case
(``.env``, ``id_rsa``, ``*.pem``, gcloud's token databases …), by the shape of a folder (a copied gcloud
configuration folder), and by its content, at any size and under any name (a private key's PEM or OpenSSH armour, a
service-account key or OAuth user credentials as JSON, also in base64, an SQLite token database, a Google access
token, an AWS credentials file, a Docker client configuration with a registry's password, a kubeconfig with a user's
token or key, a GitHub token), named in the note with what it holds; a symbolic link is judged by its target as well
as by its own name, and a hard link to a secret in the folder is one too. Symbolic links out of the folder, FIFOs,
devices and names that are not UTF-8 are refused (``ground.localtree.scan_tree``); the whole is bounded in files and
bytes, and the walk stops where a bound is passed. Its content hash (paths and bytes, read once) names the image
layer it ships in, so unchanged code is never rebuilt, and the bytes packed into an image are checked against it;
its ``requirements.txt`` is checked against the versions the trainer image pins (TensorFlow, tf_keras, protobuf …,
and no second TensorFlow or Keras distribution) before anything is built, a line it refuses quoted with the password
or token of a URL in it masked. ``resolve_ref`` checks a ``--model``/``--dataset`` function against what ships,
``resolve_command`` the file a ``--command`` runs.
"""

from __future__ import annotations

import ast
import base64
import binascii
import codecs
import contextlib
import hashlib
import itertools
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
from ground.domain import credentials as formats
from ground.errors import UserError
from ground.files import printable, read_file, read_head
from ground.localtree import TreeFile, resolves_within, scan_tree, shown_name, user_path
from trainer.flags import PLUGIN_REF

#: What a project folder may hold, at the most (the code and small assets: data belongs in a bucket).
MAX_PROJECT_FILES = 5_000
MAX_PROJECT_BYTES = 100 * 1024 * 1024
#: A .gitignore, .dockerignore or requirements.txt is read whole: a few KB, at most this.
MAX_IGNORE_BYTES = 1024 * 1024
#: The most ignore files one scan reads (a .gitignore in a folder, .git/info/exclude), and the most bytes all of them
#: hold together: a .gitignore in each of 5,000 folders is refused, not read.
MAX_IGNORE_FILES = 1_000
MAX_IGNORE_TOTAL_BYTES = 4 * MAX_IGNORE_BYTES
#: An ignore file's patterns beyond this many lines are not read.
MAX_IGNORE_LINES = 10_000
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
#: A private key's armour: PEM (RFC 7468), OpenSSH's, PuTTY's.
_PRIVATE_KEY = re.compile(rb"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|PuTTY-User-Key-File-\d")


def _setting(name: str, value: bytes) -> re.Pattern[bytes]:
    """A line ``name = value`` (an INI file's setting; the value alone on its line, quoted or not)."""
    return re.compile(rb"(?m)^[ \t]*" + re.escape(name.encode()) + rb"[ \t]*=[ \t]*([\"']?)" + value
                      + rb"\1[ \t]*\r?$")


def _yaml_key(names: tuple[str, ...], value: bytes, indented: bool) -> re.Pattern[bytes]:
    """A YAML line ``name: value`` (a list item's too), at the top level or indented, the key quoted or not."""
    keys = b"|".join(re.escape(n.encode()) for n in names)
    return re.compile(rb"(?m)^" + (rb"[ \t]+(?:-[ \t]+)?" if indented else b"") + rb"[\"']?(?:" + keys
                      + rb")[\"']?[ \t]*:[ \t]*" + value)


#: What a secret's bytes look like, wherever they are in a file: ``(what it is, patterns)``, every one of which the
#: file holds (sources: ground/domain/credentials.py). Google's: a service-account key's or OAuth user credentials'
#: JSON fields, gcloud's SQLite token databases, an OAuth access token. Others': an AWS credentials file's secret key
#: (its 40 characters alone, or any 16 beside its key id: a line of Python that names the setting or assigns it a
#: variable is no secret), a Docker client configuration's registry password, a kubeconfig user's token or key, a
#: GitHub token.
_SIGNS: tuple[tuple[str, tuple[re.Pattern[bytes], ...]], ...] = (
    ("a private key", (_PRIVATE_KEY,)),
    ("a service-account key", (re.compile(rb'"type"\s*:\s*"' + formats.SERVICE_ACCOUNT_TYPE.encode() + rb'"'),)),
    ("a private key in JSON", (re.compile(rb'"' + formats.PRIVATE_KEY_FIELD.encode() + rb'"\s*:\s*"'),)),
    ("OAuth user credentials", tuple(re.compile(rb'"' + name.encode() + rb'"\s*:')
                                     for name in formats.USER_CREDENTIAL_FIELDS[:2])),
    ("a token database", (re.compile(rb"\ASQLite format 3\x00"),
                          re.compile(rb"CREATE TABLE[^(]{0,40}\b(?:"
                                     + b"|".join(t.encode() for t in formats.GCLOUD_TOKEN_TABLES) + rb")\b", re.I))),
    ("a Google access token", (re.compile(rb"(?<![A-Za-z0-9_.-])" + re.escape(formats.ACCESS_TOKEN_PREFIX.encode())
                                          + rb"[A-Za-z0-9_.-]{20,}"),)),
    ("AWS credentials", (_setting(formats.AWS_KEY_SETTINGS[1], rb"[A-Za-z0-9/+]{40}"),)),
    ("AWS credentials", (_setting(formats.AWS_KEY_SETTINGS[0], rb"[A-Z0-9]{16,128}"),
                         _setting(formats.AWS_KEY_SETTINGS[1], rb"[A-Za-z0-9/+=]{16,128}"))),
    ("a Docker registry password", (re.compile(rb'"' + formats.DOCKER_AUTHS_FIELD.encode() + rb'"\s*:\s*\{'),
                                    re.compile(rb'"' + formats.DOCKER_AUTH_FIELD.encode()
                                               + rb'"\s*:\s*"[A-Za-z0-9+/=]{4,}"'))),
    ("a kubeconfig's credentials", (_yaml_key((formats.KUBECONFIG_USERS_FIELD,), b"", indented=False),
                                    _yaml_key(formats.KUBECONFIG_SECRET_FIELDS,
                                              rb"[\"']?[A-Za-z0-9._~+/=-]{16,}", indented=True))),
    ("a GitHub token", (re.compile(rb"(?<![A-Za-z0-9_])(?:(?:"
                                   + b"|".join(re.escape(p.encode()) for p in formats.GITHUB_TOKEN_PREFIXES)
                                   + rb")[A-Za-z0-9]{36}|" + re.escape(formats.GITHUB_FINE_GRAINED_PREFIX.encode())
                                   + rb"[A-Za-z0-9_]{22,})"),)),
)
#: The signs of Google credentials in JSON, looked for in a base64 blob too.
_JSON_SIGNS = tuple(sign for sign in _SIGNS if sign[0] in ("a service-account key", "a private key in JSON",
                                                           "OAuth user credentials"))
REQUIREMENTS = "requirements.txt"
#: TensorFlow's distributions (and Apple's plug-in that installs its own): an image has one of them, and a second would
#: be installed beside it. Compared canonicalized (``packaging.utils.canonicalize_name``).
_TENSORFLOW = ("tensorflow", "tensorflow-cpu", "tensorflow-tpu", "tensorflow-gpu", "tensorflow-intel", "tf-nightly",
               "tf-nightly-cpu", "tf-nightly-gpu", "intel-tensorflow", "tensorflow-cpu-aws", "tensorflow-rocm",
               "tensorflow-macos", "tensorflow-metal")
#: Keras's other distributions, each with the pinned distribution it would be installed beside.
_KERAS = {"tf-keras-nightly": "tf-keras", "keras-nightly": "keras"}
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


class _IgnoreRules:
    """What the folder's ignore files leave out, git's way (gitignore(5),
    https://man7.org/linux/man-pages/man5/gitignore.5.html, read 2026-12-07): a ``.gitignore`` in any folder matches
    paths relative to that folder, a deeper one's patterns override a higher one's, ``$GIT_DIR/info/exclude`` (the
    ``.git`` folder's, or the one a ``.git`` file's ``gitdir:`` names) ranks below every ``.gitignore``, and within
    one file the last pattern that matches decides. The ``.dockerignore`` at the top ranks above them all, and
    ``ALWAYS_LEFT_OUT`` below (a ``!`` pattern brings one back). A folder's files are read when the walk first asks
    about a path below it (a folder left out is never read), each bounded (``MAX_IGNORE_BYTES``), and so are their
    number and total size."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.files_read = 0
        self.bytes_read = 0
        self.always = _spec(ALWAYS_LEFT_OUT)
        self.docker = _spec(self._lines(root / ".dockerignore", ".dockerignore"))
        self.folders: dict[str, tuple[pathspec.PathSpec, ...]] = {}

    def _lines(self, path: Path, name: str, *, inside: bool = True) -> list[str]:
        """The lines of the ignore file ``path`` (none when there is no such file). An ignore file of the folder that
        is a link out of it is not read (the walk refuses it in one line); a repository's own files (``inside``
        False: a worktree's ``info/exclude`` lives in the main repository) are read wherever they are."""
        if not path.is_file() or inside and not resolves_within(path, self.root):
            return []
        self.files_read += 1
        where = f"--code {self.root}: {shown_name(name)}"
        if self.files_read > MAX_IGNORE_FILES:
            raise UserError(f"--code {self.root} holds more than {MAX_IGNORE_FILES:,} ignore files (stopped at "
                            f"'{shown_name(name)}'): leave the folders that hold them out with a .dockerignore")
        # bounded and never blocking (ground.files): an ignore file is a few lines, a 5 GB one is not read whole
        text = read_file(path, where, MAX_IGNORE_BYTES, hint="an ignore file is a list of patterns")
        self.bytes_read += len(text)
        if self.bytes_read > MAX_IGNORE_TOTAL_BYTES:
            raise UserError(f"--code {self.root}: its ignore files hold more than {MAX_IGNORE_TOTAL_BYTES // 2**20} "
                            f"MiB (stopped at '{shown_name(name)}'); an ignore file is a list of patterns")
        return text.decode("utf-8", "replace").splitlines()[:MAX_IGNORE_LINES]

    def _exclude(self, folder: str) -> list[str]:
        """The lines of the ``info/exclude`` of a repository whose work tree is ``folder``."""
        git = self.root / folder / ".git"
        if git.is_dir() and not git.is_symlink():
            return self._lines(git / "info" / "exclude", f"{folder}.git/info/exclude", inside=False)
        if not git.is_file() or git.is_symlink():
            return []
        # a submodule's or a worktree's .git file: ``gitdir: PATH``, and a worktree's common folder in ``commondir``
        head = self._lines(git, f"{folder}.git")[:1]
        if not head or not head[0].startswith("gitdir:"):
            return []
        try:                        # a path that is too long, or names no folder: no exclude file
            gitdir = Path(os.path.realpath(git.parent / head[0].removeprefix("gitdir:").strip()))
            common = gitdir / "commondir"
            if common.is_file():
                gitdir = Path(os.path.realpath(gitdir / (self._lines(common, f"{folder}.git (commondir)",
                                                                     inside=False)[:1] or ["."])[0].strip()))
            return self._lines(gitdir / "info" / "exclude", f"{folder}.git/info/exclude", inside=False)
        except (OSError, ValueError):
            return []

    def _folder(self, folder: str) -> tuple[pathspec.PathSpec, ...]:
        """The specs of ``folder`` (``""`` or ``a/b/``), the one that ranks higher first."""
        specs = self.folders.get(folder)
        if specs is None:
            specs = (_spec(self._lines(self.root / folder / ".gitignore", f"{folder}.gitignore")),
                     _spec(self._exclude(folder)))
            self.folders[folder] = specs
        return specs

    def ignored(self, path: str) -> bool:
        """Whether ``path`` (relative to the folder; a folder's ends with ``/``) is left out."""
        verdict = self.docker.check_file(path).include
        if verdict is not None:
            return verdict
        parts = path.rstrip("/").split("/")
        for depth in range(len(parts) - 1, -1, -1):           # the deepest folder's files first
            folder = "".join(f"{part}/" for part in parts[:depth])
            for spec in self._folder(folder):
                verdict = spec.check_file(path[len(folder):]).include
                if verdict is not None:
                    return verdict
        return bool(self.always.check_file(path).include)


#: A PEM block written in base64 once more (a Kubernetes secret's ``tls.key: LS0tLS1CRUdJTi…``): "-----BEGIN".
_BASE64_ARMOUR = re.compile(rb"LS0tLS1CRUdJTi[A-Za-z0-9+/]{40,}")


#: JSON written in base64 (a key pasted into a config as ``"key": "ewogICJ0eXBl…"``): ``{`` and a quote, space or
#: line break encode as ``ew``/``ey``; wrapped lines (``base64``'s 76 columns, indented in a YAML block) and the
#: URL-safe alphabet are one blob. A service-account key is about 3 KB in base64, OAuth user credentials a few
#: hundred bytes: blobs of 64 to 64 Ki characters, the first 32 of a file, are decoded.
_BASE64_JSON = re.compile(rb"(?<![A-Za-z0-9+/_-])e[wy](?:[A-Za-z0-9+/_-]|\r?\n[ \t]*){62,65534}")
MAX_BASE64_BLOBS = 32


def _base64_json_kind(data: bytes) -> str | None:
    """What Google credentials a base64 blob in ``data`` decodes to, if any (bounded: ``MAX_BASE64_BLOBS``)."""
    for match in itertools.islice(_BASE64_JSON.finditer(data), MAX_BASE64_BLOBS):
        blob = re.sub(rb"\s", b"", match.group()).translate(bytes.maketrans(b"-_", b"+/"))
        try:
            decoded = base64.b64decode(blob[:len(blob) // 4 * 4])
        except binascii.Error:
            continue
        kind = next((kind for kind, patterns in _JSON_SIGNS if all(p.search(decoded) for p in patterns)), None)
        if kind is not None:
            return f"{kind} (in base64)"
    return None


def secret_kind(data: bytes) -> str | None:
    """What secret ``data`` (a file's bytes) holds, by the ``_SIGNS`` it carries; None for none. Text in UTF-16 (a
    byte-order mark) is searched as UTF-8; a PEM block or Google credentials' JSON encoded in base64 once more is
    decoded and searched too, and a file with NUL bytes (UTF-16 without a byte-order mark) is searched without
    them."""
    if data[:2] in (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE):
        data = data.decode("utf-16", "replace").encode("utf-8", "replace")
    found = next((kind for kind, patterns in _SIGNS if all(p.search(data) for p in patterns)), None)
    if found is None and b"\x00" in data and not data.startswith(b"SQLite format 3\x00"):
        # UTF-16 without its byte-order mark, or text padded with NULs: the same signs with the NULs left out
        found = secret_kind(data.replace(b"\x00", b""))
    if found is None:
        for match in _BASE64_ARMOUR.finditer(data):
            head = base64.b64decode(match.group()[:64])           # 64 base64 characters: the first 48 bytes
            if _PRIVATE_KEY.search(head):
                return "a private key (in base64)"
        found = _base64_json_kind(data)
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
    ignored = _IgnoreRules(root)
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
            if ignored.ignored(path):
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
        kind = secret_kind(data)
        if kind is not None:
            secrets.append(f"{f.rel} ({kind})")
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
        if not _MODULE_NAME.fullmatch(where):
            raise UserError(f"{flag} {shown}: {printable(where, 120)!r} is neither a .py file nor a module name")
        base = where.replace(".", "/")
        candidates = [f"{base}.py", f"{base}/__init__.py"]
        if not any(c in shipped or os.path.lexists(project.root / c) for c in candidates):
            top = canonicalize_name(where.split(".", 1)[0])
            if top in _required_names(project):
                return ref                      # a module of a distribution the image installs from requirements.txt
            raise UserError(f"{flag} {shown}: no module {where} in --code {project.root} ({candidates[0]} or "
                            f"{candidates[1]}), and no requirement in its {REQUIREMENTS} provides it; a plug-in function "
                            "is your code: in that folder, or in a distribution its requirements install")
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


#: A dotted module name (``pkg.models``), as ``--model pkg.models:build`` and ``python -m pkg.train`` name one.
_MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
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
    python = _PYTHON.fullmatch(head) is not None
    script = module = None
    if python or head in _SHELLS:
        for word in words:
            if word in ("-c", "-"):
                return
            if python and word in _PYTHON_VALUED:
                next(words, None)
            elif python and word.startswith("-m"):
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
    elif module and _MODULE_NAME.fullmatch(module):
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


#: The userinfo of a URL (``https://user:password@host``, ``git+https://TOKEN@host``): up to the last ``@`` of the
#: word (a password with an ``@`` of its own is masked whole).
_USERINFO = re.compile(r"(://)\S*@")


def _quoted(line: str, limit: int = 100) -> str:
    """A requirements line (or a message quoting one) as one printable line, with the userinfo of every URL in it
    masked (``https://***@host/…``): a line that is refused is shown, its password or token is not."""
    return printable(_USERINFO.sub(r"\1***@", line), limit)


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
        shown = _quoted(line)
        if line.startswith("-") or "://" in line or line.startswith((".", "/")):
            raise UserError(f"{where}: {shown}: only plain requirements (name and versions) are "
                            "installed into the image; options, URLs and local paths are not")
        try:
            parsed = Requirement(line)
        except InvalidRequirement as exc:
            raise UserError(f"{where}: {shown} is not a requirement ({_quoted(str(exc), 300)})") from None
        name = canonicalize_name(parsed.name)
        pinned = pins.get(name)
        if name in _TENSORFLOW and pinned is None:
            image_tf = next(((n, v) for n, v in pins.items() if n in _TENSORFLOW), None)
            if image_tf is not None:       # another TensorFlow distribution would be installed beside the image's
                raise UserError(f"{where}: {shown}: the trainer image provides TensorFlow as "
                                f"{image_tf[0]}=={image_tf[1]}; drop {name} from {REQUIREMENTS}")
        keras = next((k for k in (_KERAS[name], *_KERAS.values()) if k in pins), None) if name in _KERAS else None
        if keras is not None:            # a nightly Keras would be installed beside the image's (the same module)
            raise UserError(f"{where}: {shown}: the trainer image provides Keras as {keras}=={pins[keras]}; "
                            f"drop {name} from {REQUIREMENTS}")
        if pinned is not None and not parsed.specifier.contains(pinned, prereleases=True):
            raise UserError(f"{where}: {shown} conflicts with the trainer image's {name}=={pinned}; "
                            f"drop it or allow {pinned} (the image's framework stack is pinned: {lock.name})")
        if parsed.marker is None or parsed.marker.evaluate({"python_version": "3.11", "sys_platform": "linux"}):
            lines.append(line)
    return lines
