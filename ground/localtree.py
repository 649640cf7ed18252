"""Local folders read as trees of files, safely: the one walk that hub uploads, hub fetches and the Pulumi
program's hub cache use, so a folder never leaks a file from outside it.

A symlink may point only inside the folder (its target's bytes are used); a symlink leaving the folder,
a dangling symlink, a symlink loop, a FIFO, socket or device, a name with a backslash or ``.``/empty
segments, and too long a name are refused with one line (``UserError``). Nothing is opened here.
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ground.errors import UserError
from ground.files import printable

NAME_MAX = 255                                   # bytes per path segment (Linux, macOS)
PATH_MAX = os.pathconf("/", "PC_PATH_MAX") if hasattr(os, "pathconf") else 4096


@dataclass
class TreeFile:
    path: Path        # where to read the bytes (an in-tree symlink: its target)
    rel: str          # relative posix path under the root
    size: int
    executable: bool = False    # its owner may run it (packed as 0755 rather than 0644)


def strip_dot_prefix(name: str) -> str:
    """``./a/b`` -> ``a/b``: the prefix ``tar -C DIR .`` writes (tfhub archives have it) is allowed once."""
    while name.startswith("./"):
        name = name[2:]
    return name


def path_problem(name: str) -> str | None:
    """Why an archive member / folder entry name cannot become an object name, or None."""
    if "\\" in name:
        return "has a backslash in its path"
    if name.startswith("/") or posixpath.isabs(name) or (len(name) > 1 and name[1] == ":"):
        return "has an absolute path"
    parts = strip_dot_prefix(name).rstrip("/").split("/")
    if ".." in parts:
        return "climbs out of the folder"
    if name not in (".", "./") and ("." in parts or "" in parts):
        return "has '.' or empty segments in its path"
    if any(len(p.encode("utf8")) > NAME_MAX for p in parts):
        return f"has a path segment longer than {NAME_MAX} bytes"
    return None


def user_path(text: str, what: str) -> Path:
    """``text`` as a local path with a leading ``~`` or ``~user`` expanded; a ``~name`` with no such user (or no
    home directory) is one line naming ``what`` instead of pathlib's RuntimeError."""
    try:
        return Path(text).expanduser()
    except RuntimeError:
        head = str(text).split("/", 1)[0]
        raise UserError(f"{what} {text}: {head} names no user with a home directory here; give the full path "
                        f"(or ./{text} for a folder of that name)") from None


def first_line(exc: BaseException) -> str:
    text = str(exc)
    return text.splitlines()[0][:200] if text else exc.__class__.__name__


def os_error(exc: OSError, what: str) -> UserError:
    """A filesystem error about ``what`` as one line (too long a path, no permission, not found...)."""
    if exc.errno == errno.ENAMETOOLONG:
        return UserError(f"{what[:120]}{'…' if len(what) > 120 else ''}: path too long for this system "
                         f"(the OS allows {PATH_MAX} bytes, {NAME_MAX} per name)")
    if exc.errno == errno.ELOOP:
        return UserError(f"{what}: symlink loop")
    if isinstance(exc, PermissionError):
        return UserError(f"{what}: permission denied")
    if isinstance(exc, FileNotFoundError):
        return UserError(f"{what} does not exist")
    return UserError(f"{what}: {exc.strerror or first_line(exc)}")


def within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def resolves_within(path: Path, root: Path) -> bool:
    """``path`` with every symbolic link resolved is ``root`` (likewise resolved) or below it."""
    return within(Path(os.path.realpath(path)), Path(os.path.realpath(root)))


def _kind(mode: int) -> str:
    return ("FIFO" if stat.S_ISFIFO(mode) else "socket" if stat.S_ISSOCK(mode)
            else "device" if stat.S_ISBLK(mode) or stat.S_ISCHR(mode) else "special file")


#: The most entries one scan visits (files, folders, links; an entry reached by two paths counts twice): a tree of
#: in-tree links to folders that link twice to the next (a 791-byte archive) made 2**26 paths to walk.
MAX_TREE_ENTRIES = 1_000_000


def not_utf8(name: str) -> bool:
    """A file name the OS gave as bytes that are not UTF-8 (Python keeps them as surrogate escapes): no object
    name, image path or JSON document can carry it."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def shown_name(name: str) -> str:
    """A file name as one printable line: a name that is not UTF-8 with its odd bytes as ``\\xNN``."""
    return printable(os.fsencode(name).decode("utf-8", "backslashreplace"), 200)


#: ``skip(rel, is_folder, hops)``: whether an entry is left out (a folder: its whole subtree). ``hops`` is None for
#: an entry that is not a symbolic link; a link inside the folder is asked about again with the paths (relative to
#: the root) its chain of links passes through, the last one what it resolves to, so a link is judged by every name
#: it leads through as well as by its own.
Skip = Callable[[str, bool, tuple[str, ...] | None], bool]
#: The most links one chain is followed through (Linux's own limit).
MAX_LINK_HOPS = 40


def link_hops(link: Path, real_root: Path) -> tuple[str, ...]:
    """The paths, relative to ``real_root``, that the symbolic link ``link`` leads through, hop by hop, ending with
    the path it resolves to (hops outside the root are not named)."""
    hops: list[str] = []
    current = link
    for _ in range(MAX_LINK_HOPS):
        if not current.is_symlink():
            break
        current = Path(os.path.normpath(Path(os.path.realpath(current.parent)) / os.readlink(current)))
        if within(current, real_root) and current != real_root:
            hops.append(current.relative_to(real_root).as_posix())
    real = Path(os.path.realpath(link))
    if within(real, real_root) and real != real_root:
        hops.append(real.relative_to(real_root).as_posix())
    return tuple(dict.fromkeys(hops))


def _resolves(entry: os.DirEntry) -> bool:
    """Whether the link ``entry`` leads somewhere (so ``is_dir`` may follow it): a loop or a dangling link does not."""
    try:
        os.stat(entry.path)
    except (OSError, ValueError):
        return False
    return True


def scan_tree(root: Path, source: str, skip: Skip | None = None, *, max_entries: int = MAX_TREE_ENTRIES,
              max_files: int | None = None, max_bytes: int | None = None, bound_hint: str = "") -> list[TreeFile]:
    """Every file under ``root``, checked BEFORE anything is read, uploaded or copied.

    The same rules as for archive members: a symlink may point only inside the folder (its target's
    bytes are used); a symlink leaving the folder, a dangling symlink, a symlink loop, a FIFO, socket or
    device, a name with a backslash, too long a name or one that is not UTF-8 is refused with one line. Nothing is
    opened here. ``skip`` (``Skip``): entries left out, before any of these checks. More than ``max_entries``
    entries visited (links to folders walk their folder again) is one line too, and so is more than ``max_files``
    files or ``max_bytes`` bytes kept (with ``bound_hint``): the walk stops where the bound is passed."""
    try:
        real_root = Path(os.path.realpath(root))
    except OSError as exc:
        raise os_error(exc, source) from None
    out: list[TreeFile] = []
    visited = 0
    total = 0

    def refuse(rel: str, why: str) -> UserError:
        return UserError(f"{source}: refusing {rel!r}: {why}")

    def listing(folder: Path, rel_dir: str) -> list[os.DirEntry]:
        nonlocal visited
        entries = []
        try:
            with os.scandir(folder) as found:
                for entry in found:       # counted as they come: a folder of ten million entries is not listed whole
                    entries.append(entry)
                    visited += 1
                    if visited > max_entries:
                        raise UserError(f"{source}: more than {max_entries:,} entries to walk (at {rel_dir or '.'!r}; "
                                        "a link to a folder walks that folder again): refused")
        except OSError as exc:
            raise os_error(exc, f"{source}: {rel_dir or '.'}") from None
        return sorted(entries, key=lambda e: e.name)

    def keep(path: Path, rel: str, size: int, executable: bool = False) -> None:
        nonlocal total
        out.append(TreeFile(path, rel, size, executable))
        total += size
        if max_files is not None and len(out) > max_files:
            raise UserError(f"{source} holds more than {max_files:,} files (stopped at '{shown_name(rel)}'){bound_hint}")
        if max_bytes is not None and total > max_bytes:
            raise UserError(f"{source} holds more than {max_bytes // 2**20:,} MiB (stopped at '{shown_name(rel)}', "
                            f"{size / 2**20:,.0f} MiB){bound_hint}")

    def walk(folder: Path, rel_dir: str, active: tuple[Path, ...]) -> None:
        for entry in listing(folder, rel_dir):
            rel = f"{rel_dir}{entry.name}"
            # a link is asked about first as what it leads to (a folder or not), so `data/` in an ignore file leaves
            # out a link `data -> /mnt/data` too, before it would be refused for leading out
            if skip is not None and skip(rel, entry.is_dir(follow_symlinks=not entry.is_symlink() or _resolves(entry)),
                                         None):
                continue
            if not_utf8(entry.name):
                raise UserError(f"{source}: a file name in '{shown_name(rel_dir.rstrip('/') or '.')}' is not UTF-8 "
                                f"('{shown_name(entry.name)}'): rename it, or leave it out (an ignore file)")
            problem = path_problem(rel)
            if problem:
                raise refuse(rel, f"it {problem}")
            path = Path(entry.path)
            try:
                st = os.lstat(path)
                if stat.S_ISLNK(st.st_mode):
                    target = os.readlink(path)
                    try:
                        real = Path(os.path.realpath(path, strict=True))
                    except FileNotFoundError:
                        raise refuse(rel, f"dangling symlink -> {target!r}") from None
                    except OSError as exc:
                        if exc.errno == errno.ELOOP:
                            raise refuse(rel, f"symlink loop -> {target!r}") from None
                        raise
                    if not within(real, real_root):
                        raise UserError(f"{source}: refusing symlink {rel!r} -> {target!r} that points outside the folder")
                    st = os.stat(real)
                    if skip is not None and skip(rel, stat.S_ISDIR(st.st_mode), link_hops(path, real_root)):
                        continue
                    if stat.S_ISDIR(st.st_mode):
                        if real in active:
                            raise refuse(rel, f"symlink loop -> {target!r} (points at a folder that contains it)")
                        walk(real, rel + "/", active + (real,))
                        continue
                    path = real
                if stat.S_ISDIR(st.st_mode):
                    walk(path, rel + "/", active + (Path(os.path.realpath(path)),))
                elif stat.S_ISREG(st.st_mode):
                    keep(path, rel, st.st_size, bool(st.st_mode & stat.S_IXUSR))
                else:
                    raise refuse(rel, f"it is a {_kind(st.st_mode)}, not a regular file")
            except UserError:
                raise
            except OSError as exc:
                raise os_error(exc, f"{source}: {rel}") from None

    walk(real_root, "", (real_root,))
    return out
