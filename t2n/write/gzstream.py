"""A gzip writer for weight archives: fast, parallel, and byte-reproducible.

Why not :class:`gzip.GzipFile`: at its default strategy zlib spends its time searching for
repeated strings, which float weights do not have (random mantissas). Measured on the weights
of ``nn.Linear(4096, 4096)``: level 1 runs at ~40 MB/s for a 0.915 ratio, level 6 at ~23 MB/s
for 0.912, while ``Z_RLE`` (run-length matches + Huffman coding) runs at 60-130 MB/s for 0.910,
and still squeezes zero runs (pruned weights 0.59, all-zero tensors 0.001). tract 0.23.9 reads
only plain tar and gzip (detected by magic bytes; xz, bzip2 and zstd archives fail to load), so
the format stays gzip and the speed comes from the strategy and from threads.

Parallelism: the stream is cut into pieces at fixed positions of the written data, each piece
is deflated by its own compressor and ended with a sync flush (byte-aligned, not final), and the
pieces are concatenated into ONE deflate stream closed by an empty final block: a single-member
gzip file any reader accepts. RLE matches reach back one byte only, so cutting costs nothing in
ratio. zlib releases the GIL, so pieces compress on several cores; the output depends only on
the data (not on the thread count), which keeps archives byte-reproducible across machines.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections import deque

PIECE = 1 << 22  # bytes per independently deflated piece
_SMALL = 1 << 16  # writes below this are gathered (tar and .dat headers, padding)
LEVEL = 1
STRATEGY = zlib.Z_RLE
# magic, deflate, no flags, mtime 0, no extra flags, OS "unknown": no name, no time, reproducible
_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"


def _deflate(piece) -> tuple[bytes, bytes]:
    c = zlib.compressobj(LEVEL, zlib.DEFLATED, -15, 8, STRATEGY)
    return c.compress(piece), c.flush(zlib.Z_SYNC_FLUSH)  # two parts: no joined copy


def default_threads() -> int:
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        n = os.cpu_count() or 1
    return max(1, min(4, n))


class GzipStream:
    """``write()`` bytes-like objects (kept by reference, never copied when large); ``close()``.

    At most ``2 * threads`` pieces are in flight, so memory stays at a few pieces whatever the
    archive size. The caller must keep written buffers alive until ``close()`` returns or
    until they have left the window (weights are: they belong to the model).
    """

    def __init__(self, raw, threads: int | None = None):
        self._raw = raw
        self._threads = default_threads() if threads is None else max(1, threads)
        self._pool = None
        if self._threads > 1:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="t2n-gzip")
        self._inflight: deque = deque()
        self._pending = bytearray()
        self._crc = 0
        self._size = 0
        raw.write(_HEADER)

    def write(self, data) -> int:
        mv = memoryview(data)
        if mv.format != "B" or mv.ndim != 1:
            mv = mv.cast("B")
        n = len(mv)
        if not n:
            return 0
        self._crc = zlib.crc32(mv, self._crc)
        self._size += n
        if n < _SMALL:
            self._pending += mv
            if len(self._pending) >= PIECE:
                self._flush_pending()
            return n
        self._flush_pending()
        for i in range(0, n, PIECE):
            self._submit(mv[i:i + PIECE])
        return n

    def _flush_pending(self) -> None:
        if self._pending:
            self._submit(bytes(self._pending))
            self._pending.clear()

    def _submit(self, piece) -> None:
        if self._pool is None:
            self._raw.writelines(_deflate(piece))
            return
        self._inflight.append(self._pool.submit(_deflate, piece))
        while len(self._inflight) > 2 * self._threads:
            self._raw.writelines(self._inflight.popleft().result())

    def close(self) -> None:
        """Finish the stream: remaining pieces, the final block, CRC and size."""
        try:
            self._flush_pending()
            while self._inflight:
                self._raw.writelines(self._inflight.popleft().result())
            self._raw.write(zlib.compressobj(LEVEL, zlib.DEFLATED, -15).flush(zlib.Z_FINISH))
            self._raw.write(struct.pack("<II", self._crc & 0xFFFFFFFF, self._size & 0xFFFFFFFF))
        finally:
            self.abort()

    def abort(self) -> None:
        """Stop the workers without finishing the stream (the caller discards the file)."""
        if self._pool is not None:
            for fut in self._inflight:
                fut.cancel()
            self._pool.shutdown(wait=True)
            self._pool = None
        self._inflight.clear()
