"""Reading a small file the user named (an outputs file, a stack config file): every way it can fail is one line;
and the checksums GCS lists for an object, computed over a local file."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Callable

from tpuctl.ground.errors import UserError


def read_head(path: Path, what: str, limit: int, *, folder_hint: str, missing_hint: str,
              error: Callable[[str], Exception] = UserError) -> bytes:
    """The first ``limit + 1`` bytes of the file ``path`` (so a caller can tell one that is too big); a folder, a missing
    or unreadable file or a NUL byte in the name is one ``error`` line naming ``what`` and the path, with a hint."""
    source = f"{what} {path}"
    try:
        if not path.is_dir():
            with path.open("rb") as handle:
                return handle.read(limit + 1)
    except FileNotFoundError:
        raise error(f"{source} does not exist ({missing_hint})") from None
    except OSError as exc:
        raise error(f"cannot read {source}: {exc.strerror or exc}") from None
    except ValueError:  # a NUL byte in the name: no OS accepts it
        raise error(f"{what} {str(path)!r}: a path cannot contain a NUL byte") from None
    raise error(f"{source} is a folder; {folder_hint}")


def digest_b64(path: Path, hasher) -> str:
    """Base64 digest of a file, read in 1 MiB chunks (the encoding GCS uses for crc32c and md5Hash)."""
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            hasher.update(chunk)
    return base64.b64encode(hasher.digest()).decode()
