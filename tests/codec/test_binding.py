"""Envelope format 2: every envelope is bound to the storage key it was written for."""

from __future__ import annotations

import struct
import zlib
from typing import Any

import pytest
from checkpointkit import CheckpointCorrupted, ConfigurationError, DecodeError, DecryptionError
from checkpointkit.codec import Codec
from checkpointkit.crypto import Encryption
from checkpointkit.envelope import (
    FORMAT_VERSION,
    HEADER_SIZE,
    content_digest,
    key_checksum,
    open_envelope,
    read_header,
    reseal,
    seal,
)

KEY = "runs/a/c/fffffffffffffffe"
OTHER = "runs/f/c/fffffffffffffffe"
OLD = bytes(range(32))
NEW = bytes(range(100, 132))
VALUE: dict[str, Any] = {"secret": "s3cr3t", "t": (1, 2)}
# Two keys with the same CRC-32: only the AES-GCM associated data tells them apart.
TWIN_A, TWIN_B = "runs/r6961/input", "runs/r14330400/input"

# A format-1 envelope as every checkpointkit before format 2 wrote it (Codec().encode({"a": 1})).
FORMAT_1 = bytes.fromhex("89434b500101000004000000000000002c5ea0ed81a16101")


def encrypted(**options: Any) -> Codec:
    return Codec(encryption=Encryption({"k1": OLD}, active="k1", **options))


def test_a_bound_envelope_is_format_2_with_the_key_checksum_after_the_header() -> None:
    data = seal(b"payload", codec_tag=7, key=KEY)
    version, tag, _, flags, length, crc = struct.unpack_from("<BBBBQI", data, 4)
    assert (version, tag, flags, length) == (FORMAT_VERSION, 7, 0, len(b"payload")) == (2, 7, 0, 7)
    assert struct.unpack_from("<I", data, HEADER_SIZE)[0] == zlib.crc32(KEY.encode())
    assert crc == zlib.crc32(data[HEADER_SIZE:], zlib.crc32(data[:16]))
    assert KEY.encode() not in data  # the key is not stored twice
    header = read_header(data)
    assert header.bound and header.key_checksum == key_checksum(KEY)
    assert header.header_length == HEADER_SIZE + 4


@pytest.mark.parametrize("codec", [Codec(), encrypted()], ids=["clear", "encrypted"])
def test_a_bound_envelope_opens_only_under_its_key(codec: Codec) -> None:
    data = codec.encode(VALUE, key=KEY)
    assert codec.decode(data, key=KEY) == VALUE
    with pytest.raises(CheckpointCorrupted) as info:
        codec.decode(data, key=OTHER)
    message = str(info.value)
    assert f"the envelope at key {OTHER!r} does not belong there" in message
    assert "written for another key" in message
    assert message.count(repr(OTHER)) == 1  # the key named once (issue 20)


def test_an_envelope_moved_to_a_key_with_the_same_crc_is_refused_by_aes_gcm() -> None:
    assert zlib.crc32(TWIN_A.encode()) == zlib.crc32(TWIN_B.encode())
    codec = encrypted()
    data = codec.encode(VALUE, key=TWIN_A)
    with pytest.raises(DecryptionError, match="tampered"):
        codec.decode(data, key=TWIN_B)


def test_a_forged_key_checksum_on_an_encrypted_envelope_is_refused() -> None:
    data = bytearray(encrypted().encode(VALUE, key=KEY))
    struct.pack_into("<I", data, HEADER_SIZE, zlib.crc32(OTHER.encode()))
    struct.pack_into("<I", data, 16, zlib.crc32(data[HEADER_SIZE:], zlib.crc32(data[:16])))
    with pytest.raises(DecryptionError):
        encrypted().decode(bytes(data), key=OTHER)


@pytest.mark.parametrize("codec", [Codec(), encrypted()], ids=["clear", "encrypted"])
def test_every_bit_flip_in_a_bound_header_is_corruption_naming_the_key(codec: Codec) -> None:
    data = codec.encode(VALUE, key=KEY)
    for bit in range(read_header(data).header_length * 8):
        flipped = bytearray(data)
        flipped[bit // 8] ^= 1 << (bit % 8)
        with pytest.raises(CheckpointCorrupted) as info:
            codec.decode(bytes(flipped), key=KEY)
        assert KEY in str(info.value), f"bit {bit}: {info.value}"


def test_format_1_envelopes_still_open_under_any_key() -> None:
    assert Codec().decode(FORMAT_1, key=KEY) == {"a": 1}
    assert Codec().encode({"a": 1}) == FORMAT_1  # unbound envelopes are written as before
    legacy = encrypted(allow_plaintext=True)
    assert legacy.decode(FORMAT_1, key=KEY) == {"a": 1}


def test_unbound_envelopes_are_refused_when_the_encryption_requires_binding() -> None:
    data = encrypted().encode(VALUE)
    strict = encrypted(allow_unbound=False)
    with pytest.raises(DecryptionError) as info:
        strict.decode(data, key=KEY)
    assert KEY in str(info.value) and "allow_unbound" in str(info.value)
    assert strict.decode(strict.encode(VALUE, key=KEY), key=KEY) == VALUE


def test_a_clear_bound_envelope_opens_without_a_key_but_an_encrypted_one_does_not() -> None:
    assert Codec().decode(Codec().encode(VALUE, key=KEY)) == VALUE
    with pytest.raises(DecodeError, match="pass that key"):
        encrypted().decode(encrypted().encode(VALUE, key=KEY))


@pytest.mark.parametrize("bad", ["", 3, "\ud800"])
def test_a_bad_key_to_seal_is_a_configuration_error(bad: Any) -> None:
    with pytest.raises(ConfigurationError, match="key"):
        seal(b"x", codec_tag=1, key=bad)


def test_reseal_moves_a_record_to_the_active_key_and_keeps_its_content() -> None:
    before = Encryption({"old": OLD}, active="old")
    after = Encryption({"old": OLD, "new": NEW}, active="new")
    big = {"text": "compress me " * 5000}
    data = Codec(encryption=before).encode(big, key=KEY)
    again = reseal(data, key=KEY, encryption=after)
    header = read_header(again)
    assert header.key_id == "new" and header.bound and header.compression == 1
    assert Codec(encryption=Encryption({"new": NEW}, active="new")).decode(again, key=KEY) == big
    assert content_digest(again, key=KEY, encryption=after) == content_digest(
        data, key=KEY, encryption=after
    )
    other = Codec(encryption=before).encode({"text": "other"}, key=KEY)
    assert content_digest(other, key=KEY, encryption=after) != content_digest(
        data, key=KEY, encryption=after
    )


def test_reseal_to_another_key_binds_the_copy_there() -> None:
    data = Codec().encode(VALUE, key=KEY)
    copy = reseal(data, key=KEY, encryption=None, to_key=OTHER)
    assert Codec().decode(copy, key=OTHER) == VALUE
    with pytest.raises(CheckpointCorrupted, match="does not belong"):
        Codec().decode(copy, key=KEY)


def test_reseal_refuses_a_record_that_does_not_belong_to_its_key() -> None:
    data = Codec().encode(VALUE, key=OTHER)
    with pytest.raises(CheckpointCorrupted, match="does not belong"):
        reseal(data, key=KEY, encryption=None)


def test_reseal_refuses_plaintext_unless_allowed() -> None:
    enc = Encryption({"k1": OLD}, active="k1")
    data = Codec().encode(VALUE, key=KEY)
    with pytest.raises(DecryptionError, match="allow_plaintext"):
        reseal(data, key=KEY, encryption=enc)
    sealed = reseal(data, key=KEY, encryption=enc, allow_plaintext=True)
    assert read_header(sealed).encrypted
    assert open_envelope(sealed, key=KEY, encryption=enc)[0] == 1
