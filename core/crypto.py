"""AES-GCM encryption of envelopes, with key ids so that keys can be rotated.

An `Encryption` holds one or more keys, each under a key id, and names the
*active* one, which encrypts every new envelope. The key id is written (in clear)
into the envelope header, so decryption picks the right key by id: after a
rotation, envelopes written under an older key still open as long as that key is
still in the mapping.

``cryptography`` is an optional dependency (``pip install "checkpointkit[crypto]"``);
it is imported when an `Encryption` is built, not when this module is.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from .errors import ConfigurationError, DecryptionError

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

__all__ = ["NONCE_SIZE", "TAG_SIZE", "Encryption"]

NONCE_SIZE = 12
"""Bytes of the random AES-GCM nonce stored in each encrypted envelope."""

TAG_SIZE = 16
"""Bytes of the AES-GCM authentication tag appended to the ciphertext."""

_KEY_SIZES = (16, 24, 32)
_INSTALL_HINT = 'encryption needs the cryptography package: pip install "checkpointkit[crypto]"'


def _load_aesgcm() -> type[AESGCM]:
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError as exc:
        raise ConfigurationError(_INSTALL_HINT) from exc
    return AESGCM


class Encryption:
    """AES-GCM keys, by key id, and the id of the key that encrypts new envelopes.

    Every key in ``keys`` decrypts (it is picked by the key id stored in the
    envelope); only ``active`` encrypts. To rotate: add the new key, make it
    active, and keep the old one until nothing written under it is needed any
    more. Each envelope gets a fresh random 96-bit nonce, so a key should encrypt
    fewer than about 2**32 envelopes; rotate well before that.

    The repr never shows key bytes, only key ids.

    Args:
        keys: Key id to key. A key id is a non-empty string of at most 255 UTF-8
            bytes (it is stored in clear in each envelope: do not put secrets in
            it); a key is 16, 24 or 32 random bytes (AES-128, -192, -256).
        active: The key id used for new envelopes; must be in ``keys``.
        allow_plaintext: Whether envelopes that are not encrypted are still
            read. ``False`` (the default) refuses them with
            `DecryptionError`: whoever can write to
            the storage could otherwise plant a record that is read as genuine.
            Pass ``True`` only to read a store written before encryption was
            turned on (and encrypt it with ``rekey``).
        allow_unbound: Whether envelopes that are not bound to their storage
            key (format 1: written before format 2, or sealed without a key) are
            still read. ``True`` (the default) keeps stores written by older
            checkpointkit versions readable; once ``rekey`` has rewritten them,
            ``False`` refuses any record that could have been moved between keys.

    Raises:
        ConfigurationError: ``cryptography`` is not installed, ``keys`` is empty,
            a key id or key is malformed, or ``active`` is not in ``keys``. The
            message names the key id, never the key.
    """

    __slots__ = ("_active", "_active_id_bytes", "_ciphers", "allow_plaintext", "allow_unbound")

    def __init__(
        self,
        keys: Mapping[str, bytes],
        active: str,
        *,
        allow_plaintext: bool = False,
        allow_unbound: bool = True,
    ) -> None:
        aesgcm = _load_aesgcm()
        if not isinstance(keys, Mapping) or not keys:
            raise ConfigurationError("Encryption needs a non-empty mapping of key id to key")
        ciphers: dict[str, AESGCM] = {}
        for key_id, key in keys.items():
            _check_key_id(key_id)
            if not isinstance(key, bytes | bytearray) or len(key) not in _KEY_SIZES:
                size = len(key) if isinstance(key, bytes | bytearray) else type(key).__name__
                raise ConfigurationError(
                    f"encryption key {key_id!r} must be 16, 24 or 32 bytes, got {size}"
                )
            ciphers[key_id] = aesgcm(bytes(key))
        if active not in ciphers:
            raise ConfigurationError(
                f"active key id {active!r} is not among the keys ({_ids(ciphers)})"
            )
        self._ciphers = ciphers
        self._active = active
        self._active_id_bytes = active.encode()
        for name, flag in (("allow_plaintext", allow_plaintext), ("allow_unbound", allow_unbound)):
            if not isinstance(flag, bool):
                raise ConfigurationError(f"{name} must be True or False, got {flag!r}")
        self.allow_plaintext = allow_plaintext
        self.allow_unbound = allow_unbound

    @staticmethod
    def generate_key(size: int = 32) -> bytes:
        """Return a new random key of ``size`` bytes (16, 24 or 32) from ``os.urandom``.

        Raises:
            ConfigurationError: ``size`` is not 16, 24 or 32.
        """
        if size not in _KEY_SIZES:
            raise ConfigurationError(f"an AES key is 16, 24 or 32 bytes, not {size}")
        return os.urandom(size)

    @property
    def active(self) -> str:
        """The key id that encrypts new envelopes."""
        return self._active

    @property
    def key_ids(self) -> tuple[str, ...]:
        """Every key id that can decrypt, in the order given."""
        return tuple(self._ciphers)

    def __repr__(self) -> str:
        return f"Encryption(key_ids={list(self._ciphers)!r}, active={self._active!r})"

    @property
    def active_key_id_bytes(self) -> bytes:
        """The active key id, UTF-8 encoded, as it is written into envelope headers."""
        return self._active_id_bytes

    def seal(self, nonce: bytes, plaintext: bytes | bytearray | memoryview, aad: bytes) -> bytes:
        """Encrypt ``plaintext`` with the active key; returns ciphertext plus tag.

        Args:
            nonce: 12 fresh random bytes (see `new_nonce`).
            plaintext: The bytes to encrypt.
            aad: Associated data that is authenticated but not encrypted (the
                envelope header, and the storage key of a bound envelope).
        """
        return self._ciphers[self._active].encrypt(nonce, plaintext, aad)

    @staticmethod
    def new_nonce() -> bytes:
        """Return 12 random bytes for one encryption."""
        return os.urandom(NONCE_SIZE)

    def open(
        self, key_id: str, nonce: bytes, ciphertext: bytes | memoryview, aad: bytes, *, where: str
    ) -> bytes:
        """Decrypt and authenticate ``ciphertext`` with the key named ``key_id``.

        Args:
            key_id: The key id read from the envelope.
            nonce: The nonce read from the envelope.
            ciphertext: Ciphertext followed by its tag.
            aad: The same associated data as at encryption.
            where: What is being decrypted, for messages (``"key 'runs/a/1'"``).

        Raises:
            DecryptionError: ``key_id`` is unknown, or the key is wrong, or the
                ciphertext, nonce or header were altered.
        """
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise DecryptionError(
                f"cannot decrypt {where}: it was encrypted with key id {key_id!r}, "
                f"which this Encryption does not have (it has {_ids(self._ciphers)})"
            )
        from cryptography.exceptions import InvalidTag

        try:
            return cipher.decrypt(nonce, ciphertext, aad)
        except InvalidTag:
            raise DecryptionError(
                f"cannot decrypt {where} with key id {key_id!r}: the key is wrong "
                "(not the one it was encrypted with), or the envelope was tampered with"
            ) from None


def _check_key_id(key_id: object) -> None:
    if not isinstance(key_id, str) or not key_id:
        raise ConfigurationError(f"a key id must be a non-empty str, got {key_id!r}")
    if len(key_id.encode()) > 255:
        raise ConfigurationError(f"key id {key_id[:40]!r}... is longer than 255 UTF-8 bytes")


def _ids(ciphers: Mapping[str, object]) -> str:
    return ", ".join(repr(k) for k in ciphers)
