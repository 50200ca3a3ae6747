"""The envelope: the framing around every stored value.

Framing only: it knows nothing of how the payload was serialized, so an
integration that brings its own serializer can still use it (pass your own
``codec_tag``). Layout (integers little-endian)::

    offset  size  field
    0       4     magic b"\\x89CKP"
    4       1     format version: 1 (not bound to a key) or 2 (bound to its storage key)
    5       1     codec tag (1 = checkpointkit msgpack; see CODEC_*)
    6       1     compression tag (0 = none, 1 = zstd)
    7       1     flags (bit 0 = encrypted; other bits must be 0)
    8       8     payload length: bytes stored after the header
    16      4     CRC-32 of every other byte of the envelope (header and payload)
    20      4     [version 2 only] CRC-32 of the storage key (UTF-8) it was written for
    ..      1     [encrypted only] key id length n (1..255)
    ..      n     [encrypted only] key id, UTF-8
    ..      12    [encrypted only] AES-GCM nonce
    ...           payload: compressed (if so tagged), then encrypted (ciphertext + 16-byte tag)

The first 20 bytes keep this shape in every format version, and the CRC covers
the whole envelope whatever the version, so a bit flip is reported as
corruption even in the version byte, and an intact envelope of a newer version
is reported as such. When encrypted, the header (every byte before the payload
except the CRC) is the AES-GCM associated data, so it cannot be altered either.

**Binding** (format 2). `seal` given ``key=`` binds the envelope to that
storage key: the key's CRC-32 is stored (the key itself is not: the reader
knows it) and covered by the envelope's CRC, and, when encrypted, the whole key
is part of the AES-GCM associated data. `open_envelope` given ``key=``
then refuses, with `CheckpointCorrupted`, an
envelope written for another key (copied or moved there). The CRC-32 of the key
tells an accidental copy from a bit flip; against a writer who forges it (and
the envelope's CRC), only the AES-GCM associated data holds. Envelopes sealed
without a key are written in format 1, byte for byte as before format 2.
"""

from __future__ import annotations

import hashlib
import struct
import threading
import zlib
from dataclasses import dataclass

import zstandard

try:  # ISA-L's CRC-32: the same checksum as zlib's, about ten times faster on large payloads
    from isal.isal_zlib import crc32 as _crc32
except ImportError:  # pragma: no cover - the ``fast`` extra is not installed
    _crc32 = zlib.crc32

from .crypto import NONCE_SIZE, TAG_SIZE, Encryption
from .errors import CheckpointCorrupted, ConfigurationError, DecodeError, DecryptionError

__all__ = [
    "CODEC_JSON",
    "CODEC_MSGPACK",
    "CODEC_PICKLE",
    "COMPRESSION_NONE",
    "COMPRESSION_ZSTD",
    "FORMAT_VERSION",
    "HEADER_SIZE",
    "MAGIC",
    "SUPPORTED_VERSIONS",
    "BytesLike",
    "EnvelopeHeader",
    "content_digest",
    "key_checksum",
    "open_envelope",
    "open_view",
    "read_header",
    "reseal",
    "seal",
]

MAGIC = b"\x89CKP"
"""The first four bytes of every envelope (non-ASCII first byte, like PNG's)."""

FORMAT_VERSION = 2
"""The newest envelope format version: what `seal` writes when given a ``key``
(an envelope sealed without a key is written in format 1)."""

SUPPORTED_VERSIONS = (1, 2)
"""The envelope format versions that `open_envelope` reads."""

HEADER_SIZE = 20
"""Bytes of the fixed header (format 2 adds 4; an encrypted envelope adds 14 plus the key id)."""

CODEC_MSGPACK = 1
"""Codec tag of `checkpointkit.codec.Codec`: msgpack with checkpointkit's extensions."""

CODEC_PICKLE = 2
"""Reserved codec tag for raw pickle. `Codec` never writes
it and always refuses to decode it."""

CODEC_JSON = 3
"""Reserved codec tag for JSON payloads. Tags 128 to 255 are free for integrations."""

COMPRESSION_NONE = 0
COMPRESSION_ZSTD = 1

_UNBOUND = 1  # format version without a key binding
_BOUND = 2  # format version with the key's CRC-32 after the fixed header
_FLAG_ENCRYPTED = 0x01
_KNOWN_FLAGS = _FLAG_ENCRYPTED

_HEAD = struct.Struct("<4sBBBBQ")  # everything before the CRC
_CRC = struct.Struct("<I")
_FIELDS = struct.Struct("<BBBBQI")  # from offset 4: version .. crc
_CRC_AT = 16
_BINDING_SIZE = 4
_MAX_LEVEL = 22
_MIN_LEVEL = -(1 << 17)

_local = threading.local()

BytesLike = bytes | bytearray | memoryview
"""What `seal` and `open_envelope` accept as input."""


@dataclass(frozen=True, slots=True)
class EnvelopeHeader:
    """What the header of an envelope says (see `read_header`).

    Attributes:
        version: Envelope format version (2: bound to a key; 1: not bound).
        codec_tag: Which serializer wrote the payload.
        compression: ``COMPRESSION_NONE`` or ``COMPRESSION_ZSTD``.
        encrypted: Whether the payload is AES-GCM encrypted.
        key_id: The encryption key id, or ``None`` if not encrypted.
        payload_length: Bytes stored after the header.
        header_length: Bytes of the header, including the key checksum, key id and nonce.
        key_checksum: CRC-32 of the storage key the envelope is bound to
            (see `key_checksum`), or ``None`` if it is not bound (format 1).
    """

    version: int
    codec_tag: int
    compression: int
    encrypted: bool
    key_id: str | None
    payload_length: int
    header_length: int
    key_checksum: int | None = None

    @property
    def bound(self) -> bool:
        """Whether the envelope is bound to the storage key it was written for."""
        return self.key_checksum is not None


def _where(key: str | None) -> str:
    return f"the envelope at key {key!r}" if key is not None else "the envelope"


def _key_bytes(key: str) -> bytes:
    if not isinstance(key, str) or not key:
        raise ConfigurationError(f"an envelope's key must be a non-empty str, got {key!r}")
    try:
        return key.encode()
    except UnicodeEncodeError:
        raise ConfigurationError(f"the key {key!r} is not valid UTF-8") from None


def key_checksum(key: str) -> int:
    """The CRC-32 of ``key`` (UTF-8) that a bound envelope stores.

    Raises:
        ConfigurationError: ``key`` is not a non-empty str of valid UTF-8.
    """
    return zlib.crc32(_key_bytes(key))


def check_compression(compress_threshold: int, compression_level: int) -> None:
    """Validate compression settings.

    Raises:
        ConfigurationError: The threshold is negative or the level is not a zstd level.
    """
    if not isinstance(compress_threshold, int) or compress_threshold < 0:
        raise ConfigurationError(
            f"compress_threshold must be an int >= 0 (bytes), got {compress_threshold!r}"
        )
    if (
        not isinstance(compression_level, int)
        or isinstance(compression_level, bool)
        or not _MIN_LEVEL <= compression_level <= _MAX_LEVEL
        or compression_level == 0
    ):
        raise ConfigurationError(
            f"compression_level must be a zstd level, 1 to 22 (or negative for faster), "
            f"got {compression_level!r}"
        )


def _compressor(level: int) -> zstandard.ZstdCompressor:
    cache: dict[int, zstandard.ZstdCompressor] | None = getattr(_local, "compressors", None)
    if cache is None:
        cache = _local.compressors = {}
    comp = cache.get(level)
    if comp is None:
        comp = cache[level] = zstandard.ZstdCompressor(level=level, write_content_size=True)
    return comp


def _decompressor() -> zstandard.ZstdDecompressor:
    dec: zstandard.ZstdDecompressor | None = getattr(_local, "decompressor", None)
    if dec is None:
        dec = _local.decompressor = zstandard.ZstdDecompressor()
    return dec


_SAMPLE_ABOVE = 256 * 1024
_SAMPLE_CHUNK = 8 * 1024


def _looks_compressible(payload: BytesLike, size: int) -> bool:
    """Whether zstd level 1 shrinks three 8 KiB samples (start, middle, end) by 3% or more.

    Spares compressing a large payload that is already compressed or random
    (images, archives, ciphertext), at the cost of about 50 microseconds.
    """
    mv = memoryview(payload).cast("B")
    mid = size // 2
    compress = _compressor(1).compress
    chunks = (mv[:_SAMPLE_CHUNK], mv[mid : mid + _SAMPLE_CHUNK], mv[size - _SAMPLE_CHUNK :])
    # Each chunk on its own: one zstd block over mixed text and noise would use one
    # literal table for both and hide the text's gain.
    packed = sum(len(compress(chunk)) for chunk in chunks)
    return packed < 3 * _SAMPLE_CHUNK * 0.97


def seal(
    payload: BytesLike,
    *,
    codec_tag: int,
    compress_threshold: int = 16 * 1024,
    compression_level: int = 1,
    encryption: Encryption | None = None,
    key: str | None = None,
) -> bytes:
    """Frame ``payload`` into an envelope: header, checksum, optional zstd and AES-GCM.

    The payload is zstd-compressed when it is longer than ``compress_threshold``
    bytes and compression makes it smaller; then encrypted with the active key
    of ``encryption``, if given.

    Args:
        payload: The serialized value (any bytes-like object).
        codec_tag: Which serializer produced ``payload``, 1 to 255 (see ``CODEC_*``;
            128 to 255 are free for integrations).
        compress_threshold: Compress only payloads longer than this many bytes.
            ``sys.maxsize`` never compresses.
        compression_level: zstd level (1 to 22; default 1, the fastest).
        encryption: Encrypt with its active key; ``None`` stores the payload in clear.
        key: The storage key the envelope is written for: binds it to that key
            (format 2), so that it opens only under that key. ``None`` writes an
            unbound envelope (format 1).

    Returns:
        The envelope bytes.

    Raises:
        ConfigurationError: ``codec_tag``, a compression setting or ``key`` is invalid.
    """
    if not isinstance(codec_tag, int) or not 1 <= codec_tag <= 255:
        raise ConfigurationError(f"codec_tag must be an int from 1 to 255, got {codec_tag!r}")
    binding = None if key is None else _key_bytes(key)
    data: BytesLike = payload
    size = len(payload) if type(payload) is bytes else memoryview(payload).nbytes
    compression = COMPRESSION_NONE
    if size > compress_threshold:
        check_compression(compress_threshold, compression_level)
        if size < _SAMPLE_ABOVE or _looks_compressible(payload, size):
            packed = _compressor(compression_level).compress(payload)
            if len(packed) < size:
                data, size, compression = packed, len(packed), COMPRESSION_ZSTD
    return _frame(data, size, codec_tag, compression, encryption, binding)


def _frame(
    data: BytesLike,
    size: int,
    codec_tag: int,
    compression: int,
    encryption: Encryption | None,
    binding: bytes | None,
) -> bytes:
    """The envelope of an already compressed (or not) payload."""
    version = _UNBOUND if binding is None else _BOUND
    bind = b"" if binding is None else _CRC.pack(zlib.crc32(binding))
    if encryption is None:
        head = _HEAD.pack(MAGIC, version, codec_tag, compression, 0, size)
        crc = _crc32(data, _crc32(head + bind))
        return b"".join((head, _CRC.pack(crc), bind, data))
    key_id = encryption.active_key_id_bytes
    nonce = encryption.new_nonce()
    head = _HEAD.pack(MAGIC, version, codec_tag, compression, _FLAG_ENCRYPTED, size + TAG_SIZE)
    extra = b"".join((bind, bytes((len(key_id),)), key_id, nonce))
    aad = head + extra
    sealed = encryption.seal(nonce, data, aad if binding is None else aad + binding)
    crc = _crc32(sealed, _crc32(aad))
    return b"".join((head, _CRC.pack(crc), extra, sealed))


def read_header(data: BytesLike, *, key: str | None = None) -> EnvelopeHeader:
    """Parse and check an envelope's header without decrypting or decompressing.

    The checksum over the whole envelope is verified; the key binding is not
    (compare `EnvelopeHeader.key_checksum` with `key_checksum`, or
    use `open_envelope`).

    Args:
        data: The envelope.
        key: The storage key it came from, named in error messages.

    Raises:
        CheckpointCorrupted: Not an envelope, truncated, or a checksum or length mismatch.
        DecodeError: An unknown format version or unknown flags.
    """
    return _parse(_view(data), key)[0]


def _view(data: BytesLike) -> memoryview:
    mv = memoryview(data)
    return mv if mv.format == "B" and mv.ndim == 1 else mv.cast("B")


def _parse(mv: memoryview, key: str | None) -> tuple[EnvelopeHeader, memoryview]:
    n = len(mv)
    if n == 0:
        raise CheckpointCorrupted(f"{_where(key)} is empty (0 bytes), not a checkpointkit envelope")
    if n < 4 or mv[:4] != MAGIC:
        if 0 < n < 4 and MAGIC.startswith(mv):
            raise CheckpointCorrupted(f"{_where(key)} is truncated: only {n} bytes")
        raise CheckpointCorrupted(
            f"{_where(key)} is not a checkpointkit envelope (bad magic bytes: "
            f"{bytes(mv[:4])!r}, expected {MAGIC!r})"
        )
    if n < HEADER_SIZE:
        raise CheckpointCorrupted(
            f"{_where(key)} is truncated: {n} bytes, the header alone is {HEADER_SIZE}"
        )
    version, codec_tag, compression, flags, length, crc = _FIELDS.unpack_from(mv, 4)
    if _crc32(mv[HEADER_SIZE:], _crc32(mv[:_CRC_AT])) != crc:
        raise CheckpointCorrupted(_crc_message(mv, key, version, flags, length))
    if version not in SUPPORTED_VERSIONS:
        newer = " (written by a newer checkpointkit?)" if version > FORMAT_VERSION else ""
        raise DecodeError(
            f"{_where(key)} has envelope format version {version}{newer}; this checkpointkit "
            f"reads versions {', '.join(map(str, SUPPORTED_VERSIONS))}"
        )
    if flags & ~_KNOWN_FLAGS:
        raise DecodeError(f"{_where(key)} has unknown header flags {flags:#04x}")
    pos = HEADER_SIZE
    checksum: int | None = None
    if version == _BOUND:
        if n < pos + _BINDING_SIZE:
            raise CheckpointCorrupted(f"{_where(key)} has a malformed key binding")
        (checksum,) = _CRC.unpack_from(mv, pos)
        pos += _BINDING_SIZE
    key_id: str | None = None
    if flags & _FLAG_ENCRYPTED:
        kid_len = mv[pos] if n > pos else 0
        end = pos + 1 + kid_len + NONCE_SIZE
        if kid_len == 0 or end > n:
            raise CheckpointCorrupted(f"{_where(key)} has a malformed encryption header")
        try:
            key_id = bytes(mv[pos + 1 : pos + 1 + kid_len]).decode()
        except UnicodeDecodeError:
            raise CheckpointCorrupted(f"{_where(key)} has a malformed encryption key id") from None
        pos = end
    if n - pos != length:
        raise CheckpointCorrupted(
            f"{_where(key)} has a length mismatch: the header says {length} payload bytes, "
            f"{n - pos} follow it"
        )
    header = EnvelopeHeader(
        version=version,
        codec_tag=codec_tag,
        compression=compression,
        encrypted=key_id is not None,
        key_id=key_id,
        payload_length=length,
        header_length=pos,
        key_checksum=checksum,
    )
    return header, mv[pos:]


def _crc_message(mv: memoryview, key: str | None, version: int, flags: int, length: int) -> str:
    # Say "truncated" when the length field (if it can be trusted) explains the mismatch.
    n = len(mv)
    if version in SUPPORTED_VERSIONS and not flags & ~_KNOWN_FLAGS:
        head = HEADER_SIZE + (_BINDING_SIZE if version == _BOUND else 0)
        if flags & _FLAG_ENCRYPTED and n > head:
            head += 1 + mv[head] + NONCE_SIZE
        if n < head + length:
            return (
                f"{_where(key)} is truncated: {n} bytes, the header says "
                f"{head + length} (checksum mismatch)"
            )
        if n > head + length:
            return (
                f"{_where(key)} has a length mismatch: {n} bytes, the header says "
                f"{head + length} (checksum mismatch)"
            )
    return f"{_where(key)} is corrupted: checksum mismatch"


def open_envelope(
    data: BytesLike, *, key: str | None = None, encryption: Encryption | None = None
) -> tuple[int, bytes]:
    """Check, decrypt and decompress an envelope.

    Args:
        data: The envelope bytes.
        key: The storage key it came from: named in error messages, and checked
            against the key a bound envelope (format 2) was written for. An
            unbound envelope (format 1) opens under any key unless
            ``encryption`` refuses unbound envelopes. Without a key, a bound
            envelope in clear opens unchecked, and an encrypted one does not
            open (its associated data includes the key).
        encryption: Keys to decrypt with; needed only for encrypted envelopes.
            Its ``allow_plaintext`` and ``allow_unbound`` decide whether clear
            and unbound envelopes are read.

    Returns:
        ``(codec_tag, payload)``: the tag given to `seal` and the payload
        as it was before compression and encryption.

    Raises:
        CheckpointCorrupted: Not an envelope (bad magic), truncated, a checksum
            or length mismatch (a bit flip anywhere in the envelope), or an
            envelope bound to another key than ``key`` (copied or moved there).
        DecodeError: Unknown format version, flags or compression tag, a
            payload that does not decompress, or an encrypted bound envelope
            opened without ``key``.
        DecryptionError: The envelope is encrypted but ``encryption`` is
            ``None``, its key id is unknown, or the key is wrong; or
            ``encryption`` refuses it because it is not encrypted
            (``allow_plaintext=False``) or not bound (``allow_unbound=False``).
    """
    tag, payload = open_view(data, key=key, encryption=encryption)
    return tag, payload if isinstance(payload, bytes) else bytes(payload)


def open_view(
    data: BytesLike, *, key: str | None = None, encryption: Encryption | None = None
) -> tuple[int, bytes | memoryview]:
    """Like `open_envelope`, but the payload may be a view into ``data`` (no copy)."""
    header, payload = _open_stored(_view(data), key, encryption, None)
    if header.compression == COMPRESSION_ZSTD:
        try:
            payload = _decompressor().decompress(payload)
        except zstandard.ZstdError as exc:
            raise DecodeError(
                f"{_where(key)} has a payload that does not decompress: {exc}"
            ) from exc
    return header.codec_tag, payload


def _open_stored(
    mv: memoryview,
    key: str | None,
    encryption: Encryption | None,
    allow_plaintext: bool | None,
) -> tuple[EnvelopeHeader, bytes | memoryview]:
    """Check the envelope and its binding and decrypt it; the payload stays compressed."""
    header, body = _parse(mv, key)
    if header.compression not in (COMPRESSION_NONE, COMPRESSION_ZSTD):
        raise DecodeError(
            f"{_where(key)} has unknown compression tag {header.compression} "
            "(known: 0 = none, 1 = zstd)"
        )
    binding = _check_binding(header, key, encryption)
    if header.key_id is not None:
        if encryption is None:
            raise DecryptionError(
                f"{_where(key)} is encrypted (key id {header.key_id!r}) but no Encryption "
                "is configured to decrypt it"
            )
        aad = bytes(mv[:_CRC_AT]) + bytes(mv[HEADER_SIZE : header.header_length]) + binding
        nonce = bytes(mv[header.header_length - NONCE_SIZE : header.header_length])
        return header, encryption.open(header.key_id, nonce, body, aad, where=_where(key))
    if allow_plaintext is None:
        allow_plaintext = encryption is None or encryption.allow_plaintext
    if not allow_plaintext:
        raise DecryptionError(
            f"{_where(key)} is not encrypted, and this Encryption refuses plaintext "
            "(allow_plaintext=False, the default once keys are configured): either someone "
            "who can write to the storage planted it, or it was written before encryption "
            "was turned on; to read such a store, pass Encryption(..., allow_plaintext=True), "
            "and run rekey to encrypt it"
        )
    return header, body


def _check_binding(header: EnvelopeHeader, key: str | None, encryption: Encryption | None) -> bytes:
    """The key bytes that the AES-GCM associated data of ``header`` ends with."""
    if header.key_checksum is None:
        if key is not None and encryption is not None and not encryption.allow_unbound:
            raise DecryptionError(
                f"{_where(key)} is not bound to its key (envelope format 1, written before "
                "format 2 or without a key), and this Encryption refuses unbound envelopes "
                "(allow_unbound=False); run rekey to bind them, or pass "
                "Encryption(..., allow_unbound=True)"
            )
        return b""
    if key is None:
        if header.encrypted:  # its associated data ends with the key: no key, no decryption
            raise DecodeError(
                "the envelope is encrypted and bound to the storage key it was written for "
                f"(key checksum {header.key_checksum:#010x}); pass that key (key=...) to open it"
            )
        return b""  # in clear: readable, but the binding is not checked without a key
    binding = _key_bytes(key)
    expected = zlib.crc32(binding)
    if expected != header.key_checksum:
        raise CheckpointCorrupted(
            f"{_where(key)} does not belong there: it was written for another key (its stored "
            f"key checksum is {header.key_checksum:#010x}, this key's {expected:#010x}), so it "
            "was copied or moved here"
        )
    return binding


def content_digest(
    data: BytesLike, *, key: str | None = None, encryption: Encryption | None = None
) -> str:
    """A digest (BLAKE2b, 128 bits, hex) of what an envelope holds, whatever its encryption.

    It covers the codec tag, the compression tag and the payload as stored
    after decryption (still compressed), so it is the same for an envelope and
    any `reseal` of it (``rekey`` re-encrypts without changing it), and
    differs for any other content. The envelope is checked as by
    `open_envelope` (checksum, binding to ``key``, decryption).

    Raises:
        CheckpointCorrupted, DecodeError, DecryptionError: As `open_envelope`.
    """
    header, stored = _open_stored(_view(data), key, encryption, None)
    h = hashlib.blake2b(bytes((header.codec_tag, header.compression)), digest_size=16)
    h.update(stored)
    return h.hexdigest()


def reseal(
    data: BytesLike,
    *,
    key: str,
    encryption: Encryption | None,
    to_key: str | None = None,
    allow_plaintext: bool | None = None,
) -> bytes:
    """Open an envelope and seal its payload again: under the active key, bound to its key.

    The payload is neither decompressed nor re-encoded: it keeps its codec tag
    and compression. Used to re-encrypt stored records after a key rotation
    (``rekey``) and to copy a record to another key.

    Args:
        data: The envelope, as stored at ``key``.
        key: Where it is stored: checked against its binding (if bound).
        encryption: Decrypts it (any known key id) and encrypts the new envelope
            (with the active key). ``None`` opens and writes clear envelopes.
        to_key: The key the new envelope is bound to; defaults to ``key``.
        allow_plaintext: Read a clear envelope even if ``encryption`` refuses
            plaintext (``None``: as ``encryption`` says).

    Returns:
        The new envelope (format 2).

    Raises:
        CheckpointCorrupted, DecodeError, DecryptionError: As `open_envelope`.
    """
    header, stored = _open_stored(_view(data), key, encryption, allow_plaintext)
    target = _key_bytes(key if to_key is None else to_key)
    return _frame(
        stored, memoryview(stored).nbytes, header.codec_tag, header.compression, encryption, target
    )
