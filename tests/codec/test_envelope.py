"""The envelope: layout, compression, and every corruption reported as such, naming the key."""

from __future__ import annotations

import os
import struct
import sys
import zlib
from typing import Any

import pytest
from checkpointkit import CheckpointCorrupted, ConfigurationError, DecodeError
from checkpointkit.codec import Codec
from checkpointkit.crypto import Encryption
from checkpointkit.envelope import (
    CODEC_MSGPACK,
    COMPRESSION_NONE,
    COMPRESSION_ZSTD,
    HEADER_SIZE,
    MAGIC,
    open_envelope,
    read_header,
    seal,
)

KEY = "runs/run-1/steps/000042"


def craft(
    payload: bytes,
    *,
    version: int = 1,
    codec_tag: int = CODEC_MSGPACK,
    compression: int = COMPRESSION_NONE,
    flags: int = 0,
    length: int | None = None,
    magic: bytes = MAGIC,
) -> bytes:
    """An unbound (format 1) envelope with any header fields and a valid CRC."""
    size = len(payload) if length is None else length
    head = struct.pack("<4sBBBBQ", magic, version, codec_tag, compression, flags, size)
    crc = zlib.crc32(payload, zlib.crc32(head))
    return head + struct.pack("<I", crc) + payload


def state(size: int) -> dict[str, Any]:
    return {"text": "checkpoint " * (size // 11), "n": list(range(10)), "t": (1, 2)}


@pytest.fixture
def codec() -> Codec:
    return Codec()


def test_layout_is_magic_version_tags_length_crc_payload() -> None:
    payload = b"\x93\x01\x02\x03"
    data = seal(payload, codec_tag=7)
    assert data[:4] == MAGIC == b"\x89CKP"
    version, tag, comp, flags, length, crc = struct.unpack_from("<BBBBQI", data, 4)
    assert (version, tag, comp, flags, length) == (1, 7, COMPRESSION_NONE, 0, len(payload))
    assert crc == zlib.crc32(data[HEADER_SIZE:], zlib.crc32(data[:16]))
    assert data[HEADER_SIZE:] == payload
    assert len(data) == HEADER_SIZE + len(payload) == 24


def test_seal_and_open_carry_any_codec_tag() -> None:
    for tag in (1, 2, 128, 255):
        assert open_envelope(seal(b"abc", codec_tag=tag)) == (tag, b"abc")


def test_seal_accepts_bytearray_and_memoryview() -> None:
    assert open_envelope(seal(bytearray(b"xy"), codec_tag=200))[1] == b"xy"
    assert open_envelope(memoryview(seal(memoryview(b"xy"), codec_tag=200)))[1] == b"xy"


@pytest.mark.parametrize("tag", [0, 256, -1, "1", None])
def test_seal_refuses_a_codec_tag_out_of_range(tag: Any) -> None:
    with pytest.raises(ConfigurationError, match="codec_tag"):
        seal(b"x", codec_tag=tag)


def test_read_header_reports_the_fields() -> None:
    header = read_header(seal(b"x" * 100_000, codec_tag=130), key=KEY)
    assert header.version == 1 and header.codec_tag == 130
    assert header.compression == COMPRESSION_ZSTD and not header.encrypted
    assert header.key_id is None and header.header_length == HEADER_SIZE


# ----------------------------------------------------------------- compression


def test_payload_at_or_below_the_threshold_is_not_compressed(codec: Codec) -> None:
    payload = codec.encode_payload(state(16 * 1024 - 100))
    assert len(payload) <= 16 * 1024
    header = read_header(codec.encode(state(16 * 1024 - 100)))
    assert header.compression == COMPRESSION_NONE
    assert header.payload_length == len(payload)


def test_compressible_payload_above_the_threshold_is_compressed(codec: Codec) -> None:
    value = state(200_000)
    data = codec.encode(value)
    assert read_header(data).compression == COMPRESSION_ZSTD
    assert len(data) < len(codec.encode_payload(value)) // 5
    assert codec.decode(data) == value


def test_incompressible_payload_is_stored_uncompressed(codec: Codec) -> None:
    value = os.urandom(100_000)
    data = codec.encode(value)
    assert read_header(data).compression == COMPRESSION_NONE
    assert codec.decode(data) == value


def test_large_random_payload_skips_compression_and_large_text_does_not() -> None:
    random_data = seal(os.urandom(1 << 20), codec_tag=200)
    assert read_header(random_data).compression == COMPRESSION_NONE
    text = ("some text " * 60_000).encode() + os.urandom(200_000)
    assert read_header(seal(text, codec_tag=200)).compression == COMPRESSION_ZSTD
    assert open_envelope(seal(text, codec_tag=200))[1] == text


def test_threshold_zero_compresses_small_payloads_and_maxsize_never() -> None:
    value = "a" * 200
    assert read_header(Codec(compress_threshold=0).encode(value)).compression == COMPRESSION_ZSTD
    never = Codec(compress_threshold=sys.maxsize)
    assert read_header(never.encode(state(500_000))).compression == COMPRESSION_NONE


@pytest.mark.parametrize(
    "options",
    [
        {"compress_threshold": -1},
        {"compress_threshold": 1.5},
        {"compression_level": 0},
        {"compression_level": 23},
        {"compression_level": True},
    ],
)
def test_bad_compression_settings_are_configuration_errors(options: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        Codec(**options)


def test_compression_level_is_used(codec: Codec) -> None:
    value = state(300_000)
    fast = Codec(compression_level=1).encode(value)
    best = Codec(compression_level=19).encode(value)
    assert Codec().decode(fast) == Codec().decode(best) == value


def test_header_overhead_is_small(codec: Codec) -> None:
    value = {"step": "fetch", "result": [1, 2, 3]}
    assert len(codec.encode(value)) - len(codec.encode_payload(value)) == HEADER_SIZE
    encrypted = Codec(encryption=Encryption({"k1": bytes(32)}, active="k1"))
    overhead = len(encrypted.encode(value)) - len(codec.encode_payload(value))
    assert overhead == HEADER_SIZE + 1 + len("k1") + 12 + 16 < 200


# ----------------------------------------------------------------- corruption


def envelopes() -> dict[str, bytes]:
    enc = Codec(encryption=Encryption({"key-2024": bytes(range(32))}, active="key-2024"))
    return {
        "plain": Codec().encode(state(2_000)),
        "zstd": Codec().encode(state(60_000)),
        "encrypted": enc.encode(state(2_000)),
        "encrypted-zstd": enc.encode(state(60_000)),
    }


def decoder_for(kind: str) -> Codec:
    if kind.startswith("encrypted"):
        return Codec(encryption=Encryption({"key-2024": bytes(range(32))}, active="key-2024"))
    return Codec()


@pytest.mark.parametrize("kind", ["plain", "zstd", "encrypted", "encrypted-zstd"])
def test_every_header_bit_flip_and_sampled_payload_flips_are_corruption(kind: str) -> None:
    data = envelopes()[kind]
    codec = decoder_for(kind)
    assert codec.decode(data, key=KEY) == state(2_000 if "zstd" not in kind else 60_000)
    header_bits = range(read_header(data).header_length * 8)
    payload_bits = range(read_header(data).header_length * 8, len(data) * 8, 997)
    for bit in [*header_bits, *payload_bits, len(data) * 8 - 1]:
        flipped = bytearray(data)
        flipped[bit // 8] ^= 1 << (bit % 8)
        with pytest.raises(CheckpointCorrupted) as info:
            codec.decode(bytes(flipped), key=KEY)
        assert KEY in str(info.value), f"bit {bit}: {info.value}"


@pytest.mark.parametrize("kind", ["plain", "zstd", "encrypted"])
def test_truncation_anywhere_is_corruption_naming_the_key(kind: str) -> None:
    data = envelopes()[kind]
    codec = decoder_for(kind)
    for cut in sorted({0, 1, 3, 4, 5, 10, 16, 19, 20, 21, 30, 40, len(data) // 2, len(data) - 1}):
        with pytest.raises(CheckpointCorrupted) as info:
            codec.decode(data[:cut], key=KEY)
        assert KEY in str(info.value), f"cut at {cut}: {info.value}"


def test_truncated_payload_message_says_truncated(codec: Codec) -> None:
    data = codec.encode(state(1_000))
    with pytest.raises(CheckpointCorrupted, match="truncated"):
        codec.decode(data[:-10], key=KEY)
    with pytest.raises(CheckpointCorrupted, match="truncated"):
        codec.decode(data[:12], key=KEY)


def test_extra_trailing_bytes_are_corruption(codec: Codec) -> None:
    with pytest.raises(CheckpointCorrupted, match="length mismatch"):
        codec.decode(codec.encode([1]) + b"\x00", key=KEY)


def test_length_field_that_disagrees_with_a_valid_crc_is_corruption() -> None:
    with pytest.raises(CheckpointCorrupted, match="length mismatch"):
        open_envelope(craft(b"\x90", length=5), key=KEY)


@pytest.mark.parametrize("data", [b"", b"hello world, not an envelope", b"{}", b"\x80\x05K\x01."])
def test_bad_magic_is_not_an_envelope(data: bytes) -> None:
    with pytest.raises(CheckpointCorrupted) as info:
        Codec().decode(data, key=KEY)
    assert KEY in str(info.value)
    assert "not a checkpointkit envelope" in str(info.value) or "empty" in str(info.value)


def test_unknown_version_is_a_decode_error_naming_both_versions() -> None:
    with pytest.raises(DecodeError) as info:
        Codec().decode(craft(b"\x90", version=7), key=KEY)
    message = str(info.value)
    assert not isinstance(info.value, CheckpointCorrupted)
    assert "version 7" in message and "newer checkpointkit" in message
    assert "reads versions 1" in message and KEY in message


def test_unknown_compression_tag_is_a_decode_error() -> None:
    with pytest.raises(DecodeError, match="unknown compression tag 9"):
        Codec().decode(craft(b"\x90", compression=9), key=KEY)


def test_unknown_flags_are_a_decode_error() -> None:
    with pytest.raises(DecodeError, match="unknown header flags"):
        Codec().decode(craft(b"\x90", flags=0x80), key=KEY)


def test_unknown_codec_tag_is_a_decode_error() -> None:
    with pytest.raises(DecodeError, match="codec tag 77"):
        Codec().decode(craft(b"\x90", codec_tag=77), key=KEY)


def test_zstd_tag_on_data_that_is_not_zstd_is_a_decode_error() -> None:
    with pytest.raises(DecodeError, match="does not decompress"):
        Codec().decode(craft(b"\x90" * 10, compression=COMPRESSION_ZSTD), key=KEY)


def test_malformed_payload_with_valid_crc_is_a_decode_error() -> None:
    with pytest.raises(DecodeError, match="malformed payload") as info:
        Codec().decode(craft(b"\xc1"), key=KEY)
    assert KEY in str(info.value)


def test_unknown_extension_type_is_a_decode_error() -> None:
    import msgspec

    payload = msgspec.msgpack.encode([msgspec.msgpack.Ext(99, b"")])
    with pytest.raises(DecodeError, match="unknown extension type 99"):
        Codec().decode(craft(payload), key=KEY)


@pytest.mark.parametrize(
    ("code", "data"),
    [
        (5, b""),  # big int with no bytes is 0: fine, so use a bad one below
        (6, b"not a date"),
        (9, b"\x00"),
        (10, b"123"),
        (12, b"\x93\x01\x02\x03"),
        (13, b"\x91\x01"),
        (18, b"\x93\xa1x\x00\x91\x07"),
        (15, b"\x92\xa4nope\x01"),
    ],
)
def test_malformed_extension_values_are_decode_errors(code: int, data: bytes) -> None:
    import msgspec

    payload = msgspec.msgpack.encode({"v": msgspec.msgpack.Ext(code, data)})
    if code == 5:
        assert Codec().decode(craft(payload)) == {"v": 0}
        return
    with pytest.raises(DecodeError) as info:
        Codec().decode(craft(payload), key=KEY)
    assert KEY in str(info.value)
