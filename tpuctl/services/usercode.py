"""The user's project folder that travels with a run (``--code DIR``; docs/your-code.md).

What is sent: every file below the folder except what its ``.gitignore`` and ``.dockerignore`` (at the folder's top)
leave out, what is never code (``.git/``, virtual environments, caches), and files that look like secrets
(``.env``, private keys, service-account keys), which are left out and named. Symbolic links out of the folder,
FIFOs and devices are refused (``ground.localtree.scan_tree``); the whole is bounded in files and bytes. Its
content hash (paths and bytes) names the image layer it ships in, so unchanged code is never rebuilt, and its
``requirements.txt`` is checked against the versions the trainer image pins (TensorFlow, tf_keras, protobuf …)
before anything is built.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import pathspec
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from ground.errors import UserError
from ground.files import printable, read_file
from ground.localtree import TreeFile, scan_tree, user_path

#: What a project folder may hold, at the most (the code and small assets: data belongs in a bucket).
MAX_PROJECT_FILES = 5_000
MAX_PROJECT_BYTES = 100 * 1024 * 1024
#: A .gitignore, .dockerignore or requirements.txt is read whole: a few KB, at most this.
MAX_IGNORE_BYTES = 1024 * 1024
#: Never code: left out of every project.
ALWAYS_LEFT_OUT = [".git/", ".hg/", ".svn/", "__pycache__/", "*.pyc", ".venv/", "venv/", ".venv-*/", "env/",
                   ".mypy_cache/", ".pytest_cache/", ".ruff_cache/", ".ipynb_checkpoints/", ".tpuctl-cache/",
                   ".DS_Store"]
#: Files that look like credentials: left out, and named, so nobody ships a key by accident.
SECRET_PATTERNS = [".env", ".env.*", "*.pem", "*.key", "*.p12", "*.pfx", "id_rsa*", "id_dsa*", "id_ecdsa*",
                   "id_ed25519*", ".netrc", ".pypirc", "credentials.json", "*credentials*.json",
                   "application_default_credentials.json", "*service-account*.json", "*serviceaccount*.json",
                   ".aws/", ".ssh/", ".gnupg/"]
#: A JSON key file of a Google service account, whatever its name.
_KEY_FILE = re.compile(rb'"type"\s*:\s*"service_account"|"private_key"\s*:')
REQUIREMENTS = "requirements.txt"
#: TensorFlow's distributions: an image has one of them.
_TENSORFLOW = ("tensorflow", "tensorflow-cpu", "tensorflow-tpu", "tensorflow-gpu", "tensorflow-intel")
#: What the trainer image pins and a project may not move (the image installs its lock with --no-deps).
PINNED = ("tensorflow", "tensorflow-cpu", "tensorflow-tpu", "tf-keras", "keras", "protobuf", "numpy", "libtpu",
          "tensorflow-hub", "tensorboard", "google-crc32c", "jax", "jaxlib", "jax-cuda12-plugin", "jax-cuda12-pjrt",
          "ml-dtypes")


@dataclass(frozen=True)
class Project:
    """A scanned project folder: the files that ship, the ones left out as secrets, and its content hash."""
    root: Path
    files: tuple[TreeFile, ...]
    secrets: tuple[str, ...]

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def requirements(self) -> TreeFile | None:
        return next((f for f in self.files if f.rel == REQUIREMENTS), None)

    def digest(self) -> str:
        """sha256 over every shipped file's path and bytes (the order is the paths')."""
        h = hashlib.sha256()
        for f in self.files:
            h.update(f.rel.encode() + b"\0" + f.path.read_bytes() + b"\0")
        return h.hexdigest()


def _spec(lines: list[str]) -> pathspec.PathSpec:
    return pathspec.PathSpec.from_lines("gitignore", lines)


def _ignore_lines(root: Path, name: str) -> list[str]:
    path = root / name
    if not path.is_file():
        return []
    # bounded and never blocking (ground.files): an ignore file is a few lines, a 5 GB one is not read whole
    text = read_file(path, f"--code {root}: {name}", MAX_IGNORE_BYTES, hint="an ignore file is a list of patterns")
    return text.decode("utf-8", "replace").splitlines()[:10_000]


def scan_project(folder: str | Path) -> Project:
    """The project folder ``folder`` as it would ship (see the module docstring); one UserError line otherwise."""
    root = user_path(str(folder), "--code folder")
    if not root.is_dir():
        raise UserError(f"--code {printable(str(folder), 200)} is not a folder (your project: the folder with your "
                        "model, dataset or script)")
    ignored = _spec(ALWAYS_LEFT_OUT + _ignore_lines(root, ".gitignore") + _ignore_lines(root, ".dockerignore"))
    secret = _spec(SECRET_PATTERNS)
    secrets: list[str] = []

    def skip(rel: str, is_folder: bool) -> bool:
        path = rel + "/" if is_folder else rel
        if ignored.match_file(path):
            return True
        if secret.match_file(path):
            secrets.append(rel)
            return True
        return False

    files = scan_tree(root, f"--code {root}", skip=skip)
    kept = []
    for f in files:
        if f.rel.endswith(".json") and f.size < 64 * 1024 and _KEY_FILE.search(f.path.read_bytes()):
            secrets.append(f.rel)
            continue
        kept.append(f)
    if len(kept) > MAX_PROJECT_FILES:
        raise UserError(f"--code {root} holds {len(kept)} files, more than {MAX_PROJECT_FILES}: ship the code, keep "
                        "data in a bucket (--data-dir gs://…), or leave files out with a .dockerignore")
    total = sum(f.size for f in kept)
    if total > MAX_PROJECT_BYTES:
        big = max(kept, key=lambda f: f.size)
        raise UserError(f"--code {root} holds {total / 2**20:.0f} MiB, more than {MAX_PROJECT_BYTES // 2**20} MiB "
                        f"(largest: {big.rel}, {big.size / 2**20:.0f} MiB): keep data in a bucket, or leave files "
                        "out with a .dockerignore")
    if not any(f.rel.endswith(".py") for f in kept):
        raise UserError(f"--code {root} has no Python file to run (after .gitignore/.dockerignore)")
    return Project(root, tuple(kept), tuple(sorted(secrets)))


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
    text = read_file(req.path, f"--code {project.root}: {REQUIREMENTS}", MAX_IGNORE_BYTES,
                     hint="a requirements file is a list of packages").decode("utf-8", "replace")
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
