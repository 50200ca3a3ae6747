"""AES-GCM envelopes: round trip, key rotation, and wrong or unknown keys as DecryptionError."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import zlib
from typing import Any

import pytest
from checkpointkit import CheckpointCorrupted, ConfigurationError, DecryptionError
from checkpointkit.codec import Codec
from checkpointkit.crypto import Encryption
from checkpointkit.envelope import HEADER_SIZE, open_envelope, read_header, seal

KEY = "runs/run-9/checkpoints/0001"
OLD = bytes(range(32))
NEW = bytes(range(100, 132))
VALUE: dict[str, Any] = {"secret": "s3cr3t value", "t": (1, 2), "blob": b"\x00" * 100}


def codec_with(keys: dict[str, bytes], active: str, **options: Any) -> Codec:
    return Codec(encryption=Encryption(keys, active=active, **options))


def test_encrypted_round_trip_hides_the_plaintext() -> None:
    codec = codec_with({"k1": OLD}, "k1")
    data = codec.encode(VALUE)
    assert b"s3cr3t" not in data
    header = read_header(data)
    assert header.encrypted and header.key_id == "k1"
    assert codec.decode(data, key=KEY) == VALUE


def test_compressed_and_encrypted_round_trip() -> None:
    codec = codec_with({"k1": OLD}, "k1")
    value = {"text": "compress me " * 20_000}
    data = codec.encode(value)
    assert read_header(data).compression == 1 and len(data) < 20_000
    assert codec.decode(data) == value


@pytest.mark.parametrize("size", [16, 24, 32])
def test_every_aes_key_size_works(size: int) -> None:
    codec = codec_with({"k": os.urandom(size)}, "k")
    assert codec.decode(codec.encode(VALUE)) == VALUE


def test_each_envelope_gets_a_fresh_nonce() -> None:
    codec = codec_with({"k1": OLD}, "k1")
    assert codec.encode(VALUE) != codec.encode(VALUE)


def test_old_envelopes_decode_after_the_active_key_rotates() -> None:
    before = codec_with({"2024": OLD}, "2024")
    old_data = before.encode(VALUE)
    after = codec_with({"2024": OLD, "2025": NEW}, "2025")
    new_data = after.encode(VALUE)
    assert read_header(new_data).key_id == "2025"
    assert after.decode(old_data, key=KEY) == VALUE
    assert after.decode(new_data, key=KEY) == VALUE


def test_envelope_of_a_removed_key_is_a_decryption_error_naming_the_key_id() -> None:
    data = codec_with({"2024": OLD}, "2024").encode(VALUE)
    with pytest.raises(DecryptionError) as info:
        codec_with({"2025": NEW}, "2025").decode(data, key=KEY)
    message = str(info.value)
    assert "'2024'" in message and "'2025'" in message and KEY in message
    assert OLD.hex() not in message and NEW.hex() not in message


def test_wrong_key_under_the_same_id_is_a_decryption_error_not_corruption() -> None:
    data = codec_with({"k1": OLD}, "k1").encode(VALUE)
    with pytest.raises(DecryptionError) as info:
        codec_with({"k1": NEW}, "k1").decode(data, key=KEY)
    assert not isinstance(info.value, CheckpointCorrupted)
    assert "key is wrong" in str(info.value) and KEY in str(info.value)


def test_encrypted_envelope_without_encryption_says_so() -> None:
    data = codec_with({"k1": OLD}, "k1").encode(VALUE)
    with pytest.raises(DecryptionError, match=r"encrypted .*no Encryption is configured"):
        Codec().decode(data, key=KEY)


def test_tampering_with_a_recomputed_crc_is_a_decryption_error() -> None:
    data = bytearray(codec_with({"k1": OLD}, "k1").encode(VALUE))
    data[-20] ^= 0x01  # a ciphertext byte
    struct.pack_into("<I", data, 16, zlib.crc32(data[HEADER_SIZE:], zlib.crc32(data[:16])))
    with pytest.raises(DecryptionError, match="tampered"):
        codec_with({"k1": OLD}, "k1").decode(bytes(data), key=KEY)


def test_header_is_authenticated() -> None:
    # Switch the codec tag and recompute the CRC: AES-GCM rejects the changed header.
    data = bytearray(seal(b"payload", codec_tag=1, encryption=Encryption({"k": OLD}, "k")))
    data[5] = 200
    struct.pack_into("<I", data, 16, zlib.crc32(data[HEADER_SIZE:], zlib.crc32(data[:16])))
    with pytest.raises(DecryptionError):
        open_envelope(bytes(data), encryption=Encryption({"k": OLD}, "k"))


def test_plaintext_envelopes_are_refused_unless_allowed() -> None:
    clear = Codec().encode(VALUE)
    with pytest.raises(DecryptionError, match="not encrypted") as info:
        codec_with({"k1": OLD}, "k1").decode(clear, key=KEY)
    assert KEY in str(info.value) and "allow_plaintext=True" in str(info.value)
    legacy = codec_with({"k1": OLD}, "k1", allow_plaintext=True)
    assert legacy.decode(clear, key=KEY) == VALUE


@pytest.mark.parametrize(
    ("keys", "active", "match"),
    [
        ({}, "k", "non-empty mapping"),
        ({"k": b"short"}, "k", "16, 24 or 32 bytes, got 5"),
        ({"k": "not bytes" * 4}, "k", "got str"),
        ({"": OLD}, "", "non-empty str"),
        ({"x" * 256: OLD}, "x" * 256, "longer than 255"),
        ({"k": OLD}, "other", "active key id 'other' is not among the keys"),
    ],
)
def test_bad_encryption_settings_are_configuration_errors(
    keys: dict[str, Any], active: str, match: str
) -> None:
    with pytest.raises(ConfigurationError, match=match) as info:
        Encryption(keys, active=active)
    assert OLD.hex() not in str(info.value)


def test_repr_shows_key_ids_never_keys() -> None:
    enc = Encryption({"k1": OLD, "k2": NEW}, active="k2")
    text = repr(enc) + repr(Codec(encryption=enc))
    assert "'k1'" in text and "'k2'" in text
    assert repr(OLD) not in text and OLD.hex() not in text and repr(NEW) not in text
    assert enc.key_ids == ("k1", "k2") and enc.active == "k2"


def test_generate_key_makes_random_keys_of_valid_sizes() -> None:
    assert len(Encryption.generate_key()) == 32
    assert len(Encryption.generate_key(16)) == 16
    assert Encryption.generate_key() != Encryption.generate_key()
    with pytest.raises(ConfigurationError):
        Encryption.generate_key(20)


def test_missing_cryptography_names_the_extra() -> None:
    script = (
        "import sys; sys.modules['cryptography'] = None\n"
        "from checkpointkit.crypto import Encryption\n"
        "from checkpointkit import ConfigurationError\n"
        "try:\n"
        "    Encryption({'k': bytes(32)}, active='k')\n"
        "except ConfigurationError as e:\n"
        "    print(e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    assert 'pip install "checkpointkit[crypto]"' in out.stdout
