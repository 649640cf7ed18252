"""A JPEG stream check at memory speed: the marker structure and the tables a decoder would refuse.

``make_tfrecords`` keeps RGB/greyscale JPEGs byte for byte; decoding each one only to validate it costs more
than reading it. :func:`check` instead walks the stream as libjpeg's marker reader does (ITU-T T.81 annex B;
libjpeg-turbo jdmarker.c ``get_sof``/``get_sos``/``get_dht``/``get_dqt`` and jdhuff.c
``jpeg_make_d_derived_tbl``, read 2026-11-22) and applies the checks that are fatal errors there:

- start-of-image first; every segment's length inside the file and consistent with its content;
- frame header (SOF0/1/2 only: baseline, extended and progressive Huffman): 8-bit precision, non-zero size
  up to 65500, 1-4 components with sampling factors 1-4 and quantization tables 0-3;
- quantization tables (DQT) and Huffman tables (DHT) well formed; every scan's quantization and Huffman
  tables defined (a sequential frame may leave Huffman tables 0 and 1 out, as motion JPEG does: libjpeg-turbo's
  jdhuff.c then uses T.81's standard tables; its progressive decoder does not),
  its component ids in the frame and distinct, at most 10 blocks per interleaved MCU, progressive scan
  parameters as jdphuff.c requires; Huffman code lengths that form a prefix code (the canonical
  code of each length fits, as jpeg_make_d_derived_tbl checks) and DC symbols 0-15;
- every scan's entropy-coded data running into a real marker, and an end-of-image marker (bytes after it are
  ignored, as decoders do).

Not checked: the entropy-coded data itself (a flipped bit there is a warning, not an error, for libjpeg;
``make_tfrecords --full-decode`` decodes every image). Other frame types (arithmetic coding, lossless,
hierarchical, 12-bit) give ``None``: the caller decodes those in full.
"""

from __future__ import annotations

import functools
import re
from typing import NamedTuple


class Invalid(ValueError):
    """The stream is not a JPEG a decoder accepts; the message says why."""


class Frame(NamedTuple):
    height: int
    width: int
    components: int

#: The end of entropy-coded data: 0xFF followed by anything but a stuffed zero, a restart marker RST0-7 or a
#: fill byte (T.81 B.1.1.2, B.1.1.5). Written as a literal and a positive class, which Python's regex engine
#: searches ~20x faster than ``\xff+[^...]``.
_SCAN_END = re.compile(rb"\xff[\x01-\xcf\xd8-\xfe]")
#: Start-of-frame markers (T.81 table B.1): SOF0-3, 5-7, 9-11, 13-15.
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
#: The frame types judged here: baseline, extended sequential and progressive, Huffman-coded.
_SOF_CHECKED = frozenset({0xC0, 0xC1, 0xC2})
#: Segments libjpeg reads or skips: SOFn, DHT, DAC, DQT, DRI, SOS, DNL, APP0-15, COM (jdmarker.c
#: read_markers; any other marker is its fatal "Unsupported marker type").
_KNOWN = _SOF | {0xC4, 0xCC, 0xDB, 0xDD, 0xDA, 0xDC, 0xFE, *range(0xE0, 0xF0)}
#: Markers without a length field: TEM, RST0-7 (T.81 B.1.1.3).
_STANDALONE = frozenset({0x01, *range(0xD0, 0xD8)})
_MAX_DIMENSION = 65500  # libjpeg JPEG_MAX_DIMENSION


@functools.lru_cache(maxsize=256)  # encoders reuse their tables: most images repeat the same few
def _huffman_error(bits: bytes, values: bytes, dc: bool) -> str | None:
    """jpeg_make_d_derived_tbl's checks: the canonical code fits each length; DC symbols are 0-15."""
    code = 0
    last = max((i for i, n in enumerate(bits) if n), default=-1)
    for length in range(1, last + 2):
        code += bits[length - 1]
        if code >= 1 << length:
            return "bad Huffman table (code lengths do not form a prefix code)"
        code <<= 1
    if dc and any(v > 15 for v in values):
        return "bad Huffman table (DC symbol over 15)"
    return None


def check(raw: bytes) -> Frame | None:
    """The frame of a JPEG stream a decoder accepts; ``None`` for frame types not judged here (decode those);
    :class:`Invalid` saying why for anything else."""
    n = len(raw)
    if raw[:2] != b"\xff\xd8":
        raise Invalid("not a JPEG stream (no start-of-image marker)")
    truncated = f"truncated after {n} bytes (no end-of-image marker)"
    pos, scans = 2, 0
    frame: dict[int, tuple[int, int]] | None = None  # component id -> (sampling factors, quantization table)
    size = (0, 0, 0)
    progressive = False
    quant: set[int] = set()
    huffman: dict[tuple[int, int], str | None] = {}  # (0 DC | 1 AC, id) -> what is wrong with it, if anything
    while True:
        if pos >= n:
            raise Invalid(truncated)
        if raw[pos] != 0xFF:
            raise Invalid(f"no marker at byte {pos} (found 0x{raw[pos]:02x})")
        while pos < n and raw[pos] == 0xFF:  # fill bytes before a marker
            pos += 1
        if pos >= n:
            raise Invalid(truncated)
        marker = raw[pos]
        pos += 1
        if marker == 0xD9:
            if not scans:
                raise Invalid("no image data before the end-of-image marker")
            return Frame(*size)
        if marker in _STANDALONE:
            continue
        if marker not in _KNOWN:
            raise Invalid(f"unexpected marker 0xff{marker:02x} at byte {pos - 2}")
        if pos + 2 > n:
            raise Invalid(truncated)
        length = int.from_bytes(raw[pos:pos + 2], "big")
        if length < 2:
            raise Invalid(f"bad segment length {length} at byte {pos}")
        if pos + length > n:
            raise Invalid(truncated)
        body = raw[pos + 2:pos + length]
        pos += length

        if marker in _SOF:
            if marker not in _SOF_CHECKED:
                return None
            if frame is not None:
                raise Invalid("two frame headers")
            if len(body) < 6 or len(body) != 6 + 3 * body[5]:
                raise Invalid("bad frame header length")
            precision, height, width, count = body[0], int.from_bytes(body[1:3], "big"), \
                int.from_bytes(body[3:5], "big"), body[5]
            if precision != 8:
                return None
            if not (0 < height <= _MAX_DIMENSION and 0 < width <= _MAX_DIMENSION):
                raise Invalid(f"bad image size {width}x{height}")
            if not 1 <= count <= 4:
                raise Invalid(f"bad component count {count}")
            frame, size = {}, (height, width, count)
            for i in range(count):
                cid, sampling, table = body[6 + 3 * i:9 + 3 * i]
                if not (1 <= sampling >> 4 <= 4 and 1 <= sampling & 15 <= 4):
                    raise Invalid("bad sampling factors")
                if table > 3:
                    raise Invalid(f"bad quantization table number {table}")
                frame[cid] = (sampling, table)
            progressive = marker == 0xC2
        elif marker == 0xDB:  # DQT: one or more tables, 8- or 16-bit
            i = 0
            while i < len(body):
                precision, table = body[i] >> 4, body[i] & 15
                table_size = 1 + 64 * (2 if precision else 1)
                if table > 3 or i + table_size > len(body):
                    raise Invalid("bad quantization table")
                quant.add(table)
                i += table_size
        elif marker == 0xC4:  # DHT: one or more tables
            i = 0
            while i < len(body):
                if i + 17 > len(body):
                    raise Invalid("bad Huffman table")
                kind, table, bits = body[i] >> 4, body[i] & 15, body[i + 1:i + 17]
                count = sum(bits)
                if kind > 1 or table > 3 or count > 256 or i + 17 + count > len(body):
                    raise Invalid("bad Huffman table")
                huffman[(kind, table)] = _huffman_error(bits, body[i + 17:i + 17 + count], dc=kind == 0)
                i += 17 + count
        elif marker == 0xDA:  # start of scan, then entropy-coded data up to the next marker
            if frame is None:
                raise Invalid("scan before the frame header")
            count = body[0] if body else 0
            if not 1 <= count <= 4 or len(body) != 4 + 2 * count:
                raise Invalid("bad scan header")
            start, end, approx = body[1 + 2 * count], body[2 + 2 * count], body[3 + 2 * count]
            high, low = approx >> 4, approx & 15
            if progressive and ((end != 0 if start == 0 else (start > end or end > 63 or count != 1))
                                or (high and low != high - 1) or low > 13):
                raise Invalid("bad progressive scan parameters")
            ids = [body[1 + 2 * i] for i in range(count)]
            if any(cid not in frame for cid in ids) or len(set(ids)) != count:
                raise Invalid(f"scan names components {ids}, the frame has {sorted(frame)}")
            if count > 1 and sum((frame[c][0] >> 4) * (frame[c][0] & 15) for c in ids) > 10:
                raise Invalid("sampling factors too large for an interleaved scan")
            for i in range(count):
                cid, tables = body[1 + 2 * i], body[2 + 2 * i]
                if frame[cid][1] not in quant:
                    raise Invalid(f"quantization table {frame[cid][1]} not defined")
                used = []
                if not progressive or (start == 0 and approx >> 4 == 0):
                    used.append((0, tables >> 4))  # DC: sequential, or the first DC pass
                if not progressive or end > 0:
                    used.append((1, tables & 15))  # AC
                for kind, table in used:
                    if (kind, table) not in huffman:
                        if table <= 1 and not progressive:
                            continue  # sequential: libjpeg-turbo's jdhuff.c uses T.81's standard tables
                        raise Invalid(f"Huffman table {'AC' if kind else 'DC'} {table} not defined")
                    if huffman[(kind, table)]:  # judged when used, as libjpeg does
                        raise Invalid(huffman[(kind, table)])
            scans += 1
            found = _SCAN_END.search(raw, pos)
            if found is None:
                raise Invalid(truncated)
            pos = found.start()
