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
import collections
import contextlib
import hashlib
import itertools
import json
import os
import posixpath
import re
import shlex
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pathspec
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from ground import domain, envs
from ground.domain import credentials as formats
from ground.errors import DomainError, UserError
from ground.files import printable, read_file, read_head
from ground.localtree import TreeFile, resolves_within, scan_tree, shown_name, user_path
from ground.yamlfile import parse_yaml
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
NEVER_SHIPPED = [".git", ".hg", ".svn", ".bzr", "cvs/", "_darcs", ".tpuctl-cache", "/runs"]
#: A folder holding one of these is a run's, a trial's or a training trainer's (records.RUN_FILE,
#: tuning.local.TRIAL_FILE, trainer.task.LOCK_FILE; tests/ops/train/test_your_code.py checks they agree).
RUN_MARKERS = ("tpuctl-run.json", "tpuctl-trial.json", ".tpuctl-train.lock")
#: Files and folders whose name says credentials: left out, and named. Matched in lower case.
SECRET_PATTERNS = [".env", ".env.*", "*.env", ".envrc", "*.pem", "*.key", "*.p12", "*.pfx", "*.jks", "*.keystore", "*.ppk",
                   "id_rsa*", "id_dsa*", "id_ecdsa*", "id_ed25519*", "*_rsa", "*_ecdsa", "*_ed25519",
                   ".netrc", "_netrc", ".pypirc", "*git-credentials*", ".pgpass", ".boto", ".s3cfg", ".npmrc",
                   ".env~", ".env[ \t]*", ".databrickscfg", ".vault-token", "kaggle.json", ".kaggle/", "secrets.toml",
                   # Terraform's state and variable files (github.com/github/gitignore, Terraform.gitignore, read
                   # 2026-12-07: "likely to contain sensitive data, such as passwords, private keys")
                   "*.tfstate", "*.tfstate.*", "*.tfvars", "*.tfvars.json",
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
    """A line ``name = value`` (an INI file's setting, a shell's ``export NAME=value``, YAML's ``name: value``): the
    name in any case and quoted or not, the value alone on its line, quoted or not."""
    return re.compile(rb"(?m)^[ \t]*(?:export[ \t]+)?([\"']?)(?i:" + re.escape(name.encode()) + rb")\1[ \t]*[=:][ \t]*"
                      + rb"([\"']?)" + value + rb"\2[ \t]*,?[ \t]*\r?$")


def _word(prefix: str, rest: bytes, word: bytes) -> re.Pattern[bytes]:
    """``prefix`` then ``rest``, not inside a longer word (no ``word`` character before it). The prefix comes first
    in the pattern and the look back after it, so the search goes from one prefix to the next (about 20 times
    faster on a large file than a look back at every byte)."""
    literal = re.escape(prefix.encode())
    return re.compile(literal + rb"(?<!" + word + b"." * len(prefix) + rb")" + rest)


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
#: GitHub, GitLab or Hugging Face token.
_SIGNS: tuple[tuple[str, tuple[re.Pattern[bytes], ...]], ...] = (
    ("a service-account key", (re.compile(rb'"type"\s*:\s*"' + formats.SERVICE_ACCOUNT_TYPE.encode() + rb'"'),)),
    ("a private key", (_PRIVATE_KEY,)),
    ("a private key in JSON", (re.compile(rb'"' + formats.PRIVATE_KEY_FIELD.encode() + rb'"\s*:\s*"'),)),
    ("OAuth user credentials", tuple(re.compile(rb'"' + name.encode() + rb'"\s*:')
                                     for name in formats.USER_CREDENTIAL_FIELDS[:2])),
    ("a token database", (re.compile(rb"\ASQLite format 3\x00"),
                          re.compile(rb"CREATE TABLE[^(]{0,40}\b(?:"
                                     + b"|".join(t.encode() for t in formats.GCLOUD_TOKEN_TABLES) + rb")\b", re.I))),
    ("a Google access token", (_word(formats.ACCESS_TOKEN_PREFIX, rb"[A-Za-z0-9_.-]{20,}", rb"[A-Za-z0-9_.-]"),)),
    ("AWS credentials", (_setting(formats.AWS_KEY_SETTINGS[1], rb"[A-Za-z0-9/+]{40}"),)),
    ("AWS credentials", (_setting(formats.AWS_KEY_SETTINGS[0], rb"[A-Z0-9]{16,128}"),
                         _setting(formats.AWS_KEY_SETTINGS[1], rb"[A-Za-z0-9/+=]{16,128}"))),
    ("a Docker registry password", (re.compile(rb'"' + formats.DOCKER_AUTHS_FIELD.encode() + rb'"\s*:\s*\{'),
                                    re.compile(rb'"(?:' + b"|".join(f.encode() for f in formats.DOCKER_SECRET_FIELDS)
                                               + rb')"\s*:\s*"[^"\s]{4,}"'))),
    ("a kubeconfig's credentials", (_yaml_key((formats.KUBECONFIG_USERS_FIELD,), b"", indented=False),
                                    _yaml_key(formats.KUBECONFIG_SECRET_FIELDS,
                                              rb"[\"']?[A-Za-z0-9._~+/=-]{16,}", indented=True))),
    ("a GitHub token", (re.compile(b"|".join(_word(prefix, rb"[A-Za-z0-9]{36}", rb"[A-Za-z0-9_]").pattern
                                             for prefix in formats.GITHUB_TOKEN_PREFIXES)
                                   + b"|" + _word(formats.GITHUB_FINE_GRAINED_PREFIX, rb"[A-Za-z0-9_]{22,}",
                                                  rb"[A-Za-z0-9_]").pattern),)),
    ("a GitLab token", (_word(formats.GITLAB_TOKEN_PREFIX, rb"[A-Za-z0-9_/-]{20,}", rb"[A-Za-z0-9_-]"),)),
    ("a Hugging Face token", (_word(formats.HUGGING_FACE_TOKEN_PREFIX, rb"[A-Za-z]{34}(?![A-Za-z0-9_])",
                                    rb"[A-Za-z0-9_]"),)),
    # a setting whose name ends in "url" holding a URL with a password or a token before its host (a git remote,
    # .gitmodules, pip.conf's index-url, a DATABASE_URL): RFC 3986 userinfo
    ("a URL with a password", (re.compile(rb"(?im)^[ \t]*(?:export[ \t]+)?[\"']?[\w.-]*url[\"']?[ \t]*[=:][ \t]*[\"']?"
                                          rb"[a-z][a-z0-9+.-]*://(?:[^\s/@:\"']*:[^\s/@\"']+|[a-z0-9_.~-]{20,})@"),)),
    # git's http.extraheader with credentials (what actions/checkout writes into .git/config)
    ("an HTTP authorization header", (re.compile(rb"(?im)^[ \t]*extraheader[ \t]*=[ \t]*[\"']?authorization:"
                                                 rb"[ \t]*(?:basic|bearer)[ \t]+[A-Za-z0-9+/=._~-]{8,}"),)),
)
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
        """sha256 over every shipped file's path, the sha256 of its bytes and whether it is executable (the order is
        the paths')."""
        h = hashlib.sha256()
        for f in self.files:
            h.update(f.rel.encode() + b"\0" + (self.hashes.get(f.rel) or _sha256(self.read(f))).encode() + b"\0"
                     + (b"x\0" if f.executable else b""))
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
    """The patterns of an ignore file, in order; a line that is no pattern (``!``, a lone ``\\``, ``[z-a]``) is
    skipped, as git skips it (a seventh trial: it was a traceback)."""
    def readable(line: str) -> bool:
        try:
            pathspec.PathSpec.from_lines("gitignore", [line])
        except (ValueError, re.error):
            return False
        return True

    return pathspec.PathSpec.from_lines("gitignore", [line for line in lines if readable(line)])


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


#: Base64 (a key pasted into a config as ``"key": "ewogICJ0eXBl…"``, a Kubernetes secret's ``tls.key: LS0tLS1…``):
#: a run of 64 or more base64 characters, the standard or the URL-safe alphabet, wrapped lines (``base64``'s 76
#: columns, indented in a YAML block) included. Each is decoded at its four alignments (text before the secret, or
#: a run glued to the word before it, shifts the encoding), and what decodes to text is searched for every sign.
_BASE64_RUN = re.compile(rb"[A-Za-z0-9+/_-]{16}(?:[A-Za-z0-9+/_-]|\r?\n[ \t]*){48,}")
#: What a decoded run must hold within its first 96 bytes to be searched: 32 characters of ASCII text (JSON, PEM and
#: INI files are; random bytes are not).
_DECODED_TEXT = re.compile(rb"[\t\n\r\x20-\x7e]{32}")
#: JSON's (and YAML's double-quoted) escapes a parser decodes: ``"\u0074ype"`` is ``"type"``.
_ESCAPE = re.compile(rb"\\u([0-9A-Fa-f]{4})|\\x([0-9A-Fa-f]{2})|\\(/)")
#: A configuration file is parsed (JSON or YAML, flow style included) when it names one of these and is at most
#: this large: a kubeconfig's or a Docker client configuration's credentials are found by their place in it.
_CONFIG_WORDS = re.compile(rb"(?i)users|auths|\\u00")
MAX_CONFIG_BYTES = 256 * 1024


def _unescape(match: re.Match[bytes]) -> bytes:
    code = match[1] or match[2]
    return chr(int(code, 16)).encode("utf-8", "replace") if code else match[3]


def _config_kind(data: bytes) -> str | None:
    """Credentials a kubeconfig or a Docker client configuration holds, by where they are in the parsed document
    (JSON, or YAML in block or flow style; ground/domain/credentials.py): a user entry's token, client key or
    password; a registry entry's auth, password or token."""
    try:
        document = json.loads(data)             # JSON first: YAML refuses the tabs JSON files are indented with
    except (ValueError, RecursionError):
        try:
            document = parse_yaml(data, "a file", "of the project")   # block or flow style; no aliases
        except DomainError:
            return None
    if not isinstance(document, dict):
        return None

    def holds(entry: object, fields: tuple[str, ...]) -> bool:
        return isinstance(entry, dict) and any(isinstance(entry.get(f), str) and entry[f].strip() for f in fields)

    users = document.get(formats.KUBECONFIG_USERS_FIELD)
    if isinstance(users, list) and any(isinstance(u, dict) and holds(u.get(formats.KUBECONFIG_USER_FIELD),
                                                                     formats.KUBECONFIG_SECRET_FIELDS)
                                       for u in users[:1000]):
        return "a kubeconfig's credentials"
    auths = document.get(formats.DOCKER_AUTHS_FIELD)
    if isinstance(auths, dict) and any(holds(a, formats.DOCKER_SECRET_FIELDS) for a in list(auths.values())[:1000]):
        return "a Docker registry password"
    return None


def _base64_kind(data: bytes) -> str | None:
    """What secret a base64 run in ``data`` decodes to, if any. Every run is decoded (each character at most four
    times, at its four alignments); only a decoding that begins as text is searched."""
    for match in _BASE64_RUN.finditer(data):
        blob = re.sub(rb"\s", b"", match.group()).translate(bytes.maketrans(b"-_", b"+/"))
        for shift in range(4):
            part = blob[shift:]
            try:
                decoded = base64.b64decode(part[:len(part) // 4 * 4])
            except binascii.Error:
                continue
            if _DECODED_TEXT.search(decoded, 0, 96):
                kind = secret_kind(decoded, decode=False)
                if kind is not None:
                    return f"{kind} (in base64)"
    return None


def secret_kind(data: bytes, *, decode: bool = True) -> str | None:
    """What secret ``data`` (a file's bytes) holds, by the ``_SIGNS`` it carries; None for none. Text in UTF-16 (a
    byte-order mark) is searched as UTF-8, and a file with NUL bytes (UTF-16 without a byte-order mark) without
    them; JSON's ``\\u`` escapes are searched decoded; a small configuration file is parsed for a kubeconfig's or
    a Docker client's credentials; and (``decode``) base64 runs are decoded and searched too."""
    if data[:2] in (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE):
        data = data.decode("utf-16", "replace").encode("utf-8", "replace")
    found = next((kind for kind, patterns in _SIGNS if all(p.search(data) for p in patterns)), None)
    if found is None and b"\\" in data:
        unescaped = _ESCAPE.sub(_unescape, data)
        if unescaped != data:
            found = next((kind for kind, patterns in _SIGNS if all(p.search(unescaped) for p in patterns)), None)
    if found is None and len(data) <= MAX_CONFIG_BYTES and _CONFIG_WORDS.search(data):
        found = _config_kind(data)
    nul = b"\x00" in data and not data.startswith(b"SQLite format 3\x00")
    if found is None and nul:
        # UTF-16 without its byte-order mark, or text padded with NULs: the same signs (base64 runs included) with
        # the NULs left out
        found = secret_kind(data.replace(b"\x00", b""), decode=decode)
    if found is None and decode and not nul:
        found = _base64_kind(data)
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
    never_paths: list[str] = []                    # what was left out as version control or tpuctl's own

    def run_folder(path: Path) -> bool:
        return any(os.path.lexists(path / marker) for marker in RUN_MARKERS)

    def gcloud_folder(path: Path) -> bool:
        return any(os.path.lexists(path / name) for name in GCLOUD_FOLDER_SHAPE)

    def skip(rel: str, is_folder: bool, hops: tuple[str, ...] | None) -> bool:
        for name in (rel, *(hops or ())):
            # a line break in a name is one more character to every rule (a seventh trial: in a folder's name it
            # kept `**/` patterns, which do not match across it, from every path below: .git/, .env shipped)
            path = (name + "/" if is_folder else name).replace("\n", "\x1f").replace("\r", "\x1f")
            low = path.lower()
            if never.match_file(low) or is_folder and run_folder(root / name):
                never_paths.append(name)
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
    never_files: dict[tuple[int, int], str] | None = None
    for f in files:
        where = f"--code {root}: {shown_name(f.rel)}"
        try:
            st = os.stat(f.path)
        except OSError:
            st = None
        if st is not None and stat.S_ISREG(st.st_mode) and (st.st_dev, st.st_ino) in secret_files:
            secrets.append(f"{f.rel} (a link to a secret)")
            continue
        if st is not None and stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
            # a hard link is the same file under a second name: one into .git/ (its config, with a remote's token)
            # or a run folder never ships under any name
            if never_files is None:
                never_files = _inodes(root, never_paths)
            twin = never_files.get((st.st_dev, st.st_ino))
            if twin is not None:
                secrets.append(f"{f.rel} (the same file as {shown_name(twin)}, which never ships)")
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


#: How many entries of the folders that never ship are read to find a hard link's twin (a repository's objects are
#: not its config: past this, the rest is not looked at).
MAX_NEVER_SHIPPED_ENTRIES = 100_000


def _inodes(root: Path, paths: list[str]) -> dict[tuple[int, int], str]:
    """``(device, inode) -> path`` of the regular files at or below ``paths`` (relative to ``root``), links not
    followed, at most ``MAX_NEVER_SHIPPED_ENTRIES`` entries (the shallowest first: ``.git/config`` before its
    objects)."""
    found: dict[tuple[int, int], str] = {}
    queue, seen = collections.deque(paths), 0
    while queue and seen < MAX_NEVER_SHIPPED_ENTRIES:
        rel = queue.popleft()
        try:
            st = os.lstat(root / rel)
        except OSError:
            continue
        seen += 1
        if stat.S_ISREG(st.st_mode):
            found[(st.st_dev, st.st_ino)] = rel
        elif stat.S_ISDIR(st.st_mode):
            with contextlib.suppress(OSError), os.scandir(root / rel) as entries:
                queue.extend(f"{rel}/{e.name}" for e in itertools.islice(entries, MAX_NEVER_SHIPPED_ENTRIES))
    return found


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
    literal = _literal_binding(tree.body, name)
    if literal is not None:     # `CLASSES = [...]` named as the function (a sixth trial: the dry run took it)
        raise UserError(f"{project.root / rel}: {flag} {shown}: {name} is {literal}, not a function; name the "
                        "function that builds it")
    return f"{rel}:{name}" if where.endswith(".py") else ref


#: The values a module-level assignment binds that no call can run: what each is called in an error line.
_LITERALS = {ast.List: "a list", ast.Tuple: "a tuple", ast.Dict: "a dict", ast.Set: "a set", ast.Constant: "a constant",
             ast.JoinedStr: "a string", ast.ListComp: "a list", ast.DictComp: "a dict", ast.SetComp: "a set"}


def _literal_binding(body: list[ast.stmt], name: str) -> str | None:
    """What ``name`` is when the last statement of the module's top level that binds it assigns it a literal (a
    list, a dict, a number…), else None (a ``def``, a class, an import, a call's result: callable or not, the
    trainer says)."""
    for node in reversed(body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return None
        if isinstance(node, (ast.Import, ast.ImportFrom)) and any(
                (a.asname or a.name.split(".", 1)[0]) == name for a in node.names):
            return None
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return _LITERALS.get(type(node.value)) if node.value is not None else None
        if not isinstance(node, (ast.Expr, ast.Pass, ast.Assign, ast.AnnAssign, ast.FunctionDef,
                                 ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)):
            return None         # a block or another statement that may bind it: the trainer says
    return None


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
_PYTHON_VALUED_LETTERS = frozenset("WXQ")
#: python's long options that take the next word as their value (``--check-hash-based-pycs always``)
_PYTHON_LONG_VALUED = frozenset({"--check-hash-based-pycs"})
_SHELLS = frozenset({"sh", "bash", "dash", "zsh"})
#: a shell's options that take the next word as their value (``bash -o pipefail``, ``bash -O extglob``)
_SHELL_VALUED_LETTERS = frozenset("oO")
#: a shell's long options that take the next word as their value (``bash --rcfile FILE``)
_SHELL_LONG_VALUED = frozenset({"--rcfile", "--init-file"})


#: Where an image keeps its own programs (the base image's and the trainer's: container/Dockerfile): an absolute path
#: there is the image's; one elsewhere that exists on this machine is a file of this machine the image does not hold.
IMAGE_PATHS = ("/usr/", "/bin/", "/sbin/", "/lib/", "/opt/tpuctl/")
#: ``env``'s options that take the next word as their value (``env -u NAME``, ``env -C DIR``: GNU coreutils env(1))
_ENV_VALUED = frozenset({"-u", "--unset", "-C", "--chdir"})
_ENV_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=.*", re.S)
#: Programs that run the rest of their line as another program: (their options that take the next word as their
#: value, the words they take before that program), from GNU coreutils' env(1), timeout(1), nohup(1), nice(1),
#: stdbuf(1) and GNU time(1); the program after them is checked as if it came first.
_WRAPPERS: dict[str, tuple[frozenset[str], int]] = {
    "env": (_ENV_VALUED, 0),
    "timeout": (frozenset({"-k", "--kill-after", "-s", "--signal"}), 1),   # timeout [OPTION] DURATION COMMAND
    "nohup": (frozenset(), 0),
    "nice": (frozenset({"-n", "--adjustment"}), 0),
    "stdbuf": (frozenset({"-i", "-o", "-e", "--input", "--output", "--error"}), 0),
    "time": (frozenset({"-o", "--output", "-f", "--format"}), 0),
}


@dataclass(frozen=True)
class CommandProgram:
    """What a ``--command`` runs, behind the programs that run another (``_WRAPPERS``): its words from the program
    on, whether that is a Python interpreter, and the script or module it is given (None: neither)."""
    words: tuple[str, ...]
    python: bool
    script: str | None = None
    module: str | None = None

    @property
    def head(self) -> str:
        return os.path.basename(self.words[0])


#: Names of a process's standard input (a script read from there is no program on a worker).
_STANDARD_INPUT = frozenset({"/dev/stdin", "/dev/fd/0", "/proc/self/fd/0"})


def _split_string(word: str, rest) -> list[str] | None:
    """``env -S STRING`` / ``--split-string=STRING`` (GNU env(1)): the words of STRING (None: ``word`` is neither)."""
    if word in ("-S", "--split-string"):
        text = next(rest, "")
    elif word.startswith("--split-string="):
        text = word.split("=", 1)[1]
    elif word.startswith("-S") and len(word) > 2:
        text = word[2:]
    else:
        return None
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()


def command_program(program: tuple[str, ...] | list[str]) -> CommandProgram | None:
    """The program a ``--command`` runs (None: nothing to check: ``env`` alone, ``-c`` code); a command that names
    none is one UserError line on every target: ``python``, ``bash`` or ``python -`` alone read their program from
    standard input, which a worker has none of, and end at once with status 0 having run nothing (a sixth trial), and
    a wrapper needs the program after it."""
    shown = printable(" ".join(program), 120)
    words = list(program)
    while words and os.path.basename(words[0]) in _WRAPPERS:
        # env [-i] [-u NAME] [NAME=VALUE]… PROGRAM, timeout [-k 5] 1h PROGRAM, nohup PROGRAM…: the program they run
        wrapper = os.path.basename(words[0])
        valued, positional = _WRAPPERS[wrapper]
        rest = iter(words[1:])
        words = []
        for word in rest:
            split = _split_string(word, rest) if wrapper == "env" else None
            if split is not None:           # env -S 'python train.py': the words of that string, then the rest
                words = [*split, *rest]
                break
            if word in valued:
                next(rest, None)
            elif word.startswith("-") or (wrapper == "env" and _ENV_ASSIGNMENT.fullmatch(word)):
                continue
            elif positional:
                positional -= 1
            else:
                words = [word, *rest]
                break
        if not words and wrapper != "env":          # `env` alone prints the environment: a program of its own
            raise UserError(f"--command {shown!r} names no program for {printable(wrapper, 40)} to run: give the "
                            "program after it")
    if not words:
        return None
    if os.path.basename(words[0]) == "xargs":
        raise UserError(f"--command {shown!r}: xargs reads the arguments of its program from standard input, which a "
                        "worker has none of; give them in the command")
    head, args = os.path.basename(words[0]), iter(words[1:])
    python = _PYTHON.fullmatch(head) is not None
    script = module = None
    if python or head in _SHELLS:
        valued, stdin = (_PYTHON_LONG_VALUED, "") if python else (_SHELL_LONG_VALUED, "s")
        for word in args:
            if word == "-":
                break           # the program from standard input, which a worker has none of
            if word in valued:
                next(args, None)
                continue
            if word.startswith("--") or (not python and word[:1] == "+" and word[1:2] not in ("o", "O")):
                continue        # a long option, or a shell's option turned off (bash +e)
            if len(word) > 1 and (word[:1] == "-" or (not python and word[:1] == "+")):
                # a cluster of short options (python -Bu, bash -ec): the first that takes what follows decides
                letters = word[1:]
                for i, letter in enumerate(letters):
                    if letter == "c":
                        return None                 # -c CODE: code on the command line, taken on trust
                    if letter in stdin:
                        break                       # bash -s: the program from standard input
                    if python and letter == "m":
                        module = letters[i + 1:] or next(args, None) or ""
                        break
                    if letter in (_PYTHON_VALUED_LETTERS if python else _SHELL_VALUED_LETTERS):
                        if not letters[i + 1:]:
                            next(args, None)        # -W ignore, -o pipefail: the value is the next word
                        break
                if module is not None or (stdin and stdin in letters):
                    break
                continue
            if word in _STANDARD_INPUT:
                break           # python /dev/stdin: the program from standard input
            script = word
            break
        if script is None and module is None:
            raise UserError(f"--command {shown!r} names no program for {head} to run (a script, -m MODULE or -c "
                            "CODE): give the script after it, e.g. `python train.py`")
    elif "/" in words[0]:
        script = words[0]
    return CommandProgram(tuple(words), python, script, module)


def resolve_command(project: Project, program: tuple[str, ...] | list[str]) -> None:
    """The file a ``--command`` runs (``command_program``), checked against what ships (the program runs in the
    image's copy of the folder, so a script outside it, left out or missing fails only after machines are
    provisioned): ``python FILE``, ``python -m MODULE``, ``bash FILE``, ``./FILE``, each also behind ``env
    [NAME=VALUE…]``, ``timeout``, ``nohup``…. A path inside the folder given as an absolute path is refused (the
    image holds the folder elsewhere), and so is an absolute path outside it that exists on this machine and is not
    where an image keeps programs (``IMAGE_PATHS``). A module must be one of the folder's, the standard library's,
    the image's (``image_modules``) or a requirement's (by its distribution's name); programs on the image's PATH and
    ``-c`` code are taken on trust. One UserError line, before anything is created."""
    shown = printable(" ".join(program), 120)
    found = command_program(program)
    if found is None:
        return
    python, script, module, head = found.python, found.script, found.module, found.head
    if "/" in found.words[0]:
        _check_absolute(project, found.words[0], shown)
    if script is not None:
        rel = _inside_project(project.root, script)
        if os.path.isabs(script):
            _check_absolute(project, script, shown)
            return                      # a program of the image's own
        if rel is None:
            raise UserError(f"--command {shown!r}: {printable(script, 200)} is outside --code {project.root}; the "
                            "image holds that folder only: move the file into it")
        shipped = {f.rel: f for f in project.files}
        if python and f"{rel}/__main__.py" in shipped:
            return                      # `python DIR`: the folder's __main__.py
        if script.endswith("/"):        # `python train.py/`: no file is run by a name ending in /
            raise UserError(f"--command {shown!r}: {printable(script, 200)} names a folder; name the script's file")
        if rel not in shipped:
            raise UserError(f"--command {shown!r}: {printable(rel, 200)} in --code {project.root} "
                            f"{_not_shipped(project, rel)}")
        if not (python or head in _SHELLS):         # ./FILE: the image runs it as the kernel would
            f = shipped[rel]
            if not f.executable:
                raise UserError(f"--command {shown!r}: {printable(rel, 200)} is not executable, and the image runs "
                                f"it as it is: `chmod +x {printable(rel, 200)}`, or run it as `bash {rel}` or "
                                f"`python {rel}`")
            if not project.read(f).startswith((b"#!", b"\x7fELF")):
                raise UserError(f"--command {shown!r}: {printable(rel, 200)} has no #! line naming its interpreter: "
                                f"add one (`#!/usr/bin/env python3`), or run it as `python {rel}`")
    elif module is not None:
        _check_module(project, module, shown)


def _check_absolute(project: Project, path: str, shown: str) -> None:
    """An absolute path a command names: not one inside the folder, and not a file of this machine elsewhere."""
    if not os.path.isabs(path):
        return
    if _inside_project(project.root, path) is not None:
        raise UserError(f"--command {shown!r}: {printable(path, 200)} is inside --code {project.root}; name it "
                        "relative to that folder, which the program runs in (the image holds the folder at another "
                        "path)")
    if os.path.lexists(path) and not path.startswith(IMAGE_PATHS):
        raise UserError(f"--command {shown!r}: {printable(path, 200)} is a file of this machine, outside --code "
                        f"{project.root}; the image holds that folder only: move the file into it")


def _check_module(project: Project, module: str, shown: str) -> None:
    """``python -m MODULE``: a module name, held by the folder (its files ship), else by the standard library, the
    image or a requirement."""
    if not _MODULE_NAME.fullmatch(module):
        raise UserError(f"--command {shown!r}: {printable(module, 120)!r} is not a module name (dotted Python "
                        "names, as `python -m pkg.train` takes one); run a file as `python path/to/file.py`")
    base = module.replace(".", "/")
    top = base.split("/", 1)[0]
    if os.path.lexists(project.root / top) or os.path.lexists(project.root / f"{top}.py"):
        candidates = [f"{base}.py", f"{base}/__main__.py"]
        shipped = {f.rel for f in project.files}
        if not any(c in shipped for c in candidates):
            rel = next((c for c in candidates if os.path.lexists(project.root / c)), candidates[0])
            raise UserError(f"--command {shown!r}: {printable(rel, 200)} in --code {project.root} "
                            f"{_not_shipped(project, rel)}")
        return
    if top in sys.stdlib_module_names or top in image_modules() or \
            canonicalize_name(top) in _required_names(project):
        return
    raise UserError(f"--command {shown!r}: no module {top} in --code {project.root}, in the standard library, in "
                    f"the image or among its {REQUIREMENTS}'s distributions; put the module in that folder or add "
                    f"its distribution to {REQUIREMENTS}")


def image_modules() -> frozenset[str]:
    """The top-level modules every image holds: the trainer, pip, and each distribution of the images' locks
    (``requirements/image-*.lock``), by its import name where the trainer environment has it installed (its
    site-packages' top-level entries), else by its distribution's name."""
    names = {"trainer", "pip", "setuptools"}
    for lock in sorted((envs.REPO_ROOT / "requirements").glob("image-*.lock")):
        names.update(canonicalize_name(n).replace("-", "_") for n in pinned_versions(lock, every=True))
    root = envs.trainer_python().parent.parent
    for site in root.glob("lib/python3*/site-packages"):
        with contextlib.suppress(OSError), os.scandir(site) as entries:
            for entry in entries:
                name = entry.name.split(".", 1)[0] if not entry.is_dir() else entry.name
                if _MODULE_NAME.fullmatch(name) and not name.endswith(("_info",)):
                    names.add(name)
    return frozenset(names)


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
        if isinstance(node, ast.Delete):          # `del build` unbinds it (for what follows)
            names.difference_update(t.id for t in node.targets if isinstance(t, ast.Name))
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


def pinned_versions(lock: Path, *, every: bool = False) -> dict[str, str]:
    """``name -> version`` of the pinned packages in a lock file (``name==version`` lines): those of ``PINNED``, or
    (``every``) every one."""
    out = {}
    for line in lock.read_text().splitlines():
        name, sep, version = line.split("#", 1)[0].strip().partition("==")
        if sep and (every or canonicalize_name(name) in PINNED):
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
        try:
            applies = parsed.marker is None or parsed.marker.evaluate({"python_version": "3.11",
                                                                       "sys_platform": "linux"})
        except ValueError as exc:     # packaging's UndefinedComparison: `~=` on a value that is no version
            raise UserError(f"{where}: {shown}: its environment marker cannot be evaluated "
                            f"({_quoted(str(exc), 200)})") from None
        if applies:
            lines.append(line)
    return lines
