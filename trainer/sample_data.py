"""Write the embedded demo dataset: scikit-learn's handwritten digits as TFRecord shards + manifest.

    python -m trainer.sample_data --out DIR [--validation-fraction 0.2] [--shards 2] [--image-size 32]

No download: ``sklearn.datasets.load_digits`` ships 1797 8x8 grey images with the library. Each is
scaled to 0..255, upscaled to ``--image-size`` and stored as an RGB JPEG in the seed's schema with
class names "0".."9". Output is deterministic, so re-running into the same folder (which replaces a
previous output, swapped in only when the new one is complete: trainer.atomicdir) gives the same shards. Prints ``summary: <json>`` as its last line.
"""

from __future__ import annotations

import io
import sys
from pathlib import Path

import trainer  # noqa: F401  (environment defaults before TensorFlow loads)
from trainer import protocol
from trainer.config import SAMPLE_DATA_BOUNDS as BOUNDS
from trainer.errors import ArgumentParser, run_cli

PREFIX = "digits"
CLASSES = [str(d) for d in range(10)]


def _jpeg(pixels, size: int) -> bytes:
    from PIL import Image

    grey = Image.fromarray(pixels, mode="L").resize((size, size), Image.Resampling.BILINEAR)
    buf = io.BytesIO()
    grey.convert("RGB").save(buf, format="JPEG", quality=95)
    return buf.getvalue()


def write_demo_dataset(out: str | Path, *, validation_fraction: float = 0.2, shards: int = 2,
                       image_size: int = 32) -> dict:
    """Write the digits dataset into ``out``; returns the summary dict."""
    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    from trainer import atomicdir, records, tfrecord

    BOUNDS["validation_fraction"].check("--validation-fraction", validation_fraction)
    BOUNDS["shards"].check("--shards", shards)
    BOUNDS["image_size"].check("--image-size", image_size)
    records.check_output_dir(out, "sample_data")
    out = Path(out)

    digits = load_digits()
    pixels = np.clip(digits.images * (255.0 / 16.0), 0, 255).astype(np.uint8)
    indices = np.arange(len(pixels))
    train_idx, val_idx = train_test_split(
        indices, test_size=validation_fraction, stratify=digits.target, random_state=0)

    written: dict[str, list[tuple[str, int]]] = {}
    total_bytes = 0
    with atomicdir.replacing(out, "sample_data: destination",
                             check=lambda folder: records.check_output_dir(folder, "sample_data")) as staging:
        for split, idx in (("train", train_idx), ("validation", val_idx)):
            per_shard = -(-len(idx) // shards)
            writer = tfrecord.ShardWriter(staging, PREFIX, split, records_per_shard=per_shard)
            for i in idx:
                label = int(digits.target[i])
                writer.write(tfrecord.make_example(
                    encoded=_jpeg(pixels[i], image_size), label=label, text=CLASSES[label],
                    height=image_size, width=image_size, filename=f"digits/{label}/{i:04d}.jpg"))
            written[split] = writer.close()
            total_bytes += writer.bytes_written
        manifest = records.build_manifest(prefix=PREFIX, classes=CLASSES, image_size=(image_size, image_size),
                                          shards=written, source="sample_data")
        records.write_manifest(staging, manifest)
    return {
        "dir": str(out),
        "prefix": PREFIX,
        "train": manifest["splits"]["train"]["examples"],
        "validation": manifest["splits"]["validation"]["examples"],
        "classes": CLASSES,
        "image_size": [image_size, image_size],
        "shards": sum(len(v) for v in written.values()),
        "bytes": total_bytes,
    }


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m trainer.sample_data", description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="local folder to write (created; a previous output is replaced)")
    parser.add_argument("--validation-fraction", type=BOUNDS["validation_fraction"].parse, default=0.2,
                        help=f"validation share, default 0.2 ({BOUNDS['validation_fraction'].describe()})")
    parser.add_argument("--shards", type=BOUNDS["shards"].parse, default=2,
                        help=f"shards per split, default 2 ({BOUNDS['shards'].describe()})")
    parser.add_argument("--image-size", type=BOUNDS["image_size"].parse, default=32,
                        help=f"side of the stored square images, default 32 ({BOUNDS['image_size'].describe()})")

    def run():
        args = parser.parse_args(argv)
        summary = write_demo_dataset(args.out, validation_fraction=args.validation_fraction,
                                     shards=args.shards, image_size=args.image_size)
        protocol.emit(protocol.SUMMARY, summary)

    return run_cli(run, handle_signals=True)


if __name__ == "__main__":
    sys.exit(main())
