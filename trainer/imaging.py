"""Image loading for the TFRecord converter's worker processes (Pillow only: no TensorFlow start-up).

``python -m trainer.imaging OUT IMAGE...`` writes each IMAGE as ``make_tfrecords`` stores it (:func:`main`):
``tpuctl predict`` sends images of the formats a served model may not decode (GIF, BMP, WebP, TIFF) this way,
so a model sees them as it saw them in training.
"""

from __future__ import annotations

import io
import re
import sys
import warnings
from pathlib import Path
from typing import NamedTuple

from trainer import jpegcheck, protocol
from trainer.errors import ArgumentParser, UsageError, run_cli
from trainer.flags import IMAGE_FORMATS


class Checked(NamedTuple):
    """An image as it is stored: JPEG bytes, their size, whether they are the file's own bytes (``kept``) and
    whether the image was downsized to ``max_side`` (``resized``)."""

    encoded: bytes
    height: int
    width: int
    kept: bool
    resized: bool = False


class Skip(NamedTuple):
    """Why an image is left out. ``kind`` is a stable key (the summary's ``skipped_reasons``, docs/trainer.md):
    ``empty``, ``not-an-image``, ``unsupported-format``, ``truncated``, ``too-large``, ``corrupt``,
    ``unreadable``, ``changed``; ``reason`` says it in words."""

    kind: str
    reason: str


#: The first bytes of each format of IMAGE_FORMATS (WebP: "RIFF", 4 bytes of size, "WEBP").
_SIGNATURES: dict[str, tuple[bytes, ...]] = {
    "JPEG": (b"\xff\xd8\xff",),
    "PNG": (b"\x89PNG\r\n\x1a\n",),
    "GIF": (b"GIF87a", b"GIF89a"),
    "BMP": (b"BM",),
    "TIFF": (b"II*\x00", b"MM\x00*"),
}
#: Formats people find in photo folders that Pillow does not read: named in the reason, with the fix.
_ISO_BRANDS = {b"heic": "HEIC", b"heix": "HEIC", b"hevc": "HEIC", b"heim": "HEIC", b"heis": "HEIC",
               b"mif1": "HEIF", b"msf1": "HEIF", b"jxl ": "JPEG XL"}
_BOMB = re.compile(r"\((\d+) pixels\) exceeds limit of (\d+) pixels")


def sniff(head: bytes) -> str | None:
    """The image format ``head`` (a file's first bytes) starts like, if any is known."""
    for name, signatures in _SIGNATURES.items():
        if head.startswith(signatures):
            return name
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "WebP"
    if head[4:8] == b"ftyp" and head[8:12] in _ISO_BRANDS:
        return _ISO_BRANDS[head[8:12]]
    if head.startswith((b"\xff\x0a", b"\x00\x00\x00\x0cJXL ")):
        return "JPEG XL"
    if head.startswith(b"%PDF"):
        return "PDF"
    return None


def _text(head: bytes) -> str | None:
    """What a file that holds text is, roughly ("an HTML page", "a text file"), or None for binary data."""
    if b"\x00" in head:
        return None
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as err:
        if err.start < len(head) - 4:  # not just a character cut at the end of the sample
            return None
        text = head[:err.start].decode("utf-8")
    lower = text.lstrip("\ufeff \t\r\n").lower()
    if lower.startswith(("<!doctype html", "<html")):
        return "an HTML page (a download that saved a web page?)"
    if lower.startswith("<svg") or (lower.startswith("<?xml") and "<svg" in lower):
        return "an SVG drawing (convert it to PNG)"
    return "a text file"


def explain(raw: bytes, err: BaseException) -> Skip:
    """Why Pillow could not read ``raw`` (a whole image file), from the error and the file's first bytes."""
    from PIL import Image, UnidentifiedImageError

    head = raw[:1024]
    found = sniff(head)
    message = str(err).splitlines()[0] if str(err) else ""
    if isinstance(err, Image.DecompressionBombError):
        m = _BOMB.search(message)
        detail = (f"{int(m.group(1)):,} pixels, over the decoder's limit of {int(m.group(2)):,} for one image"
                  if m else message)
        return Skip("too-large", f"too large to decode: {detail}")
    if isinstance(err, UnidentifiedImageError):
        if found is not None and found not in IMAGE_FORMATS:
            return Skip("unsupported-format", f"unsupported format {found} (the formats read are "
                                              f"{', '.join(IMAGE_FORMATS)}): convert it to JPEG or PNG")
        if found is not None:
            return Skip("corrupt", f"a {found} file whose header cannot be read (cut short or damaged)")
        what = _text(head)
        if what is not None:
            return Skip("not-an-image", f"not an image: {what}")
        return Skip("not-an-image", "not an image: its first bytes match no image format")
    if "truncat" in message.lower() or isinstance(err, EOFError) or _cut_short(raw, found):
        return Skip("truncated", f"truncated {found or 'image'} file ({message or type(err).__name__})")
    return Skip("corrupt", f"cannot decode {found or 'the image'}: {describe(err)}")


def _cut_short(raw: bytes, found: str | None) -> bool:
    """A WebP file shorter than its RIFF header says (libwebp only says it "could not create decoder object")."""
    return found == "WebP" and len(raw) < 8 + int.from_bytes(raw[4:8], "little")


def _jpeg_skip(err: jpegcheck.Invalid) -> Skip:
    text = str(err)
    return Skip("truncated", text) if text.startswith("truncated") else Skip("corrupt", f"corrupt JPEG: {text}")


def check_image(path: str, full_decode: bool = False, max_side: int | None = None) -> tuple[bool, Checked | Skip]:
    """``(True, Checked)`` or ``(False, Skip)`` saying why the image is left out.

    Every image is checked here, so broken files are reported now and never reach training. RGB or
    greyscale JPEGs are kept byte for byte after :func:`jpegcheck.check` walked the whole stream and its
    tables (memory speed); with ``full_decode`` they are also decoded, at 1/8 scale (libjpeg still
    entropy-decodes every scan, only the inverse DCT is reduced): a real decoder's second opinion; ``kept``
    is True and the bytes are the file's. Everything else (other formats, CMYK, JPEG frame types the check does not judge
    such as arithmetic coding) is decoded in full, converted to RGB (transparency over white) and re-encoded
    as a baseline JPEG, quality 95, which every decoder reads. With ``max_side``, an image whose longer side is
    over it (a JPEG too) is decoded, downsized to that longer side (aspect ratio kept, Lanczos) and re-encoded
    the same way; smaller images are handled as without it.
    """
    from PIL import Image

    try:
        raw = Path(path).read_bytes()
    except OSError as err:
        return False, Skip("unreadable", f"cannot read it: {describe(err)}")
    try:
        if not raw:
            return False, Skip("empty", "empty file (0 bytes)")
        if raw[:2] == b"\xff\xd8":
            frame = jpegcheck.check(raw)
            if (frame is not None and frame.components in (1, 3)  # greyscale or RGB: kept as it is
                    and (max_side is None or max(frame.height, frame.width) <= max_side)):
                if full_decode:
                    with Image.open(io.BytesIO(raw)) as image:
                        image.draft(image.mode, (1, 1))
                        image.load()
                return True, Checked(raw, frame.height, frame.width, True)
        with warnings.catch_warnings():
            # Pillow's notes on large or odd files (DecompressionBombWarning, corrupt EXIF) are not failures: the
            # image decodes; a worker's stderr is for the skipped files.
            warnings.simplefilter("ignore")
            with Image.open(io.BytesIO(raw)) as image:
                size = _downsized(image.size, max_side)
                if size is not None and image.format == "JPEG":
                    image.draft(image.mode, size)  # libjpeg's own scaling: never below ``size``
                image.load()
                rgb = _rgb(image)
        if size is not None:
            rgb = rgb.resize(size, Image.Resampling.LANCZOS)
        out = io.BytesIO()
        rgb.save(out, format="JPEG", quality=95)
        return True, Checked(out.getvalue(), rgb.height, rgb.width, False, size is not None)
    except jpegcheck.Invalid as err:
        return False, _jpeg_skip(err)
    except Exception as err:  # noqa: BLE001 - any decoder failure means: skip this file, say why
        return False, explain(raw, err)


def _downsized(size: tuple[int, int], max_side: int | None) -> tuple[int, int] | None:
    """(width, height) with the longer side ``max_side`` and the aspect ratio kept, or None when it fits."""
    width, height = size
    if max_side is None or max(width, height) <= max_side:
        return None
    scale = max_side / max(width, height)
    return (max(1, round(width * scale)), max(1, round(height * scale)))


def _rgb(image):
    from PIL import Image

    if image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info):
        rgba = image.convert("RGBA")
        rgb = Image.new("RGB", rgba.size, (255, 255, 255))
        rgb.paste(rgba, mask=rgba.getchannel("A"))
        return rgb
    return image.convert("RGB")


def describe(err: BaseException) -> str:
    text = str(err).splitlines()[0] if str(err) else ""
    return f"{type(err).__name__}: {text}".rstrip(": ")


def main(argv: list[str] | None = None) -> int:
    """``python -m trainer.imaging OUT IMAGE...``: each IMAGE checked and encoded as ``make_tfrecords`` stores it
    (:func:`check_image`, no --max-side), written to ``OUT/<n>.jpg`` (n: its position, from 0; OUT must be an
    existing folder). The last stdout line is ``summary: {"images": [...]}``, one entry per IMAGE in order:
    ``{"image", "height", "width"}`` or, for one ``make_tfrecords`` would skip, ``{"image", "kind", "reason"}``."""
    parser = ArgumentParser(prog="python -m trainer.imaging",
                            description="Write images as make_tfrecords stores them (JPEG, RGB).")
    parser.add_argument("out", help="existing folder for <n>.jpg")
    parser.add_argument("images", nargs="+", help="image files")

    def run():
        args = parser.parse_args(argv)
        out = Path(args.out)
        if not out.is_dir():
            raise UsageError(f"output folder {out} does not exist")
        results = []
        for index, path in enumerate(args.images):
            ok, payload = check_image(path)
            if ok:
                (out / f"{index}.jpg").write_bytes(payload.encoded)
                results.append({"image": path, "height": payload.height, "width": payload.width})
            else:
                results.append({"image": path, "kind": payload.kind, "reason": payload.reason})
        protocol.emit(protocol.SUMMARY, {"images": results})

    return run_cli(run)


if __name__ == "__main__":
    sys.exit(main())
