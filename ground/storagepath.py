"""Where tpuctl reads and writes: a local path or a Cloud Storage address ``gs://BUCKET/PATH``, one shape.

Flags and records carry such a place as text (a run's ``--model-dir``, a data folder, an export); this module
is the one test of which kind it is (``is_gs``), the one parser of the Cloud Storage kind (``GsPath.parse``,
the bucket checked against Google's naming rules by ``ground.domain.split_gs_uri``), and the one check of a
folder flag that a cloud target needs in Cloud Storage (``cloud_folder``). No client here: reading and writing
is ``cloud.clients``' and the services'.
"""

from __future__ import annotations

from dataclasses import dataclass

from ground import domain
from ground.errors import UserError
from ground.files import printable

GS = "gs://"


def is_gs(place: object) -> bool:
    """True for a Cloud Storage address (``gs://…``), False for a local path."""
    return str(place).startswith(GS)


@dataclass(frozen=True)
class GsPath:
    """``gs://BUCKET/PATH`` parsed: the bucket (named by Google's rules) and the object name or folder below it,
    without a leading or trailing slash (``""``: the bucket itself)."""
    bucket: str
    path: str = ""

    @classmethod
    def parse(cls, uri: str) -> GsPath:
        """Raises ``DomainError`` (one line) for an address that is not ``gs://`` or whose bucket name is bad."""
        bucket, path = domain.split_gs_uri(str(uri).strip())
        return cls(bucket, path.strip("/"))

    def __str__(self) -> str:
        return f"{GS}{self.bucket}/{self.path}" if self.path else f"{GS}{self.bucket}"

    def join(self, *parts: str) -> GsPath:
        """The object or folder ``parts`` below this one."""
        tail = "/".join(p.strip("/") for p in parts if p.strip("/"))
        return GsPath(self.bucket, f"{self.path}/{tail}" if self.path and tail else self.path or tail)

    @property
    def prefix(self) -> str | None:
        """The listing prefix of everything inside this folder (``path/``); None for the whole bucket."""
        return f"{self.path}/" if self.path else None


def normalized(place: str) -> str:
    """A place as runs record it: a gs:// address checked and without its trailing slash; a local path as given."""
    return str(GsPath.parse(place)) if is_gs(place) else place


def cloud_folder(value: str, flag: str, needs: str) -> str:
    """The folder ``flag`` names for a job that runs in Google Cloud (``needs``: who reads or writes it, e.g.
    "a Vertex AI job reads from"): it must be in Cloud Storage; its bucket name checked; no trailing slash."""
    if not is_gs(value):
        raise UserError(f"{flag} {printable(value, 200)}: {needs} Cloud Storage; use gs://BUCKET/PATH")
    return str(GsPath.parse(value))
