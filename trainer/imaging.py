"""Image loading for the TFRecord converter's worker processes (Pillow only: no TensorFlow start-up)."""

from __future__ import annotations

import io
from pathlib import Path

from trainer import jpegcheck

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".gif", ".bmp", ".webp", ".tif", ".tiff")


def check_image(path: str, full_decode: bool = False) -> tuple[bool, object]:
    """``(True, (jpeg bytes, height, width, kept))`` or ``(False, "reason")`` for an unreadable image.

    Every image is checked here, so broken files are reported now and never reach training. RGB or
    greyscale JPEGs are kept byte for byte after :func:`jpegcheck.check` walked the whole stream and its
    tables (memory speed); with ``full_decode`` they are also decoded, at 1/8 scale (libjpeg still
    entropy-decodes every scan, only the inverse DCT is reduced): a real decoder's second opinion; ``kept``
    is True and the bytes are the file's. Everything else (other formats, CMYK, JPEG frame types the check does not judge
    such as arithmetic coding) is decoded in full, converted to RGB (transparency over white) and re-encoded
    as a baseline JPEG, quality 95, which every decoder reads.
    """
    from PIL import Image

    try:
        raw = Path(path).read_bytes()
        if raw[:2] == b"\xff\xd8":
            frame = jpegcheck.check(raw)
            if frame is not None and frame.components in (1, 3):  # greyscale or RGB: kept as it is
                if full_decode:
                    with Image.open(io.BytesIO(raw)) as image:
                        image.draft(image.mode, (1, 1))
                        image.load()
                return True, (raw, frame.height, frame.width, True)
        with Image.open(io.BytesIO(raw)) as image:
            mode = image.mode
            width, height = image.size
            image.load()
            if mode in ("RGBA", "LA", "PA") or (mode == "P" and "transparency" in image.info):
                rgba = image.convert("RGBA")
                rgb = Image.new("RGB", rgba.size, (255, 255, 255))
                rgb.paste(rgba, mask=rgba.getchannel("A"))
            else:
                rgb = image.convert("RGB")
            out = io.BytesIO()
            rgb.save(out, format="JPEG", quality=95)
            return True, (out.getvalue(), height, width, False)
    except jpegcheck.Invalid as err:
        return False, str(err)
    except Exception as err:  # noqa: BLE001 - any decoder failure means: skip this file, say why
        return False, describe(err)


def describe(err: BaseException) -> str:
    text = str(err).splitlines()[0] if str(err) else ""
    return f"{type(err).__name__}: {text}".rstrip(": ")
