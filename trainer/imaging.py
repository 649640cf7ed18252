"""Image loading for the TFRecord converter's worker processes (Pillow only: no TensorFlow start-up)."""

from __future__ import annotations

import io
from pathlib import Path

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".gif", ".bmp", ".webp", ".tif", ".tiff")


def load_as_jpeg(path: str) -> tuple[bool, object]:
    """``(True, (jpeg bytes, height, width))`` or ``(False, "reason")`` for an unreadable image.

    The whole image is decoded (so truncated files are caught here, not during training). Baseline
    RGB or greyscale JPEGs are kept byte for byte; everything else is converted to RGB (transparency
    over white) and re-encoded as JPEG quality 95.
    """
    from PIL import Image

    try:
        raw = Path(path).read_bytes()
        with Image.open(io.BytesIO(raw)) as image:
            image.load()
            fmt, mode = image.format, image.mode
            width, height = image.size
            if fmt == "JPEG" and mode in ("RGB", "L"):
                return True, (raw, height, width)
            if mode in ("RGBA", "LA", "PA") or (mode == "P" and "transparency" in image.info):
                rgba = image.convert("RGBA")
                rgb = Image.new("RGB", rgba.size, (255, 255, 255))
                rgb.paste(rgba, mask=rgba.getchannel("A"))
            else:
                rgb = image.convert("RGB")
            out = io.BytesIO()
            rgb.save(out, format="JPEG", quality=95)
            return True, (out.getvalue(), height, width)
    except Exception as err:  # noqa: BLE001 - any decoder failure means: skip this file, say why
        text = str(err).splitlines()[0] if str(err) else ""
        return False, f"{type(err).__name__}: {text}".rstrip(": ")
