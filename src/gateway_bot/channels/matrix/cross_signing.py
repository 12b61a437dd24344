"""Cross-signing, so Element shows the bot's device as verified by its owner account.

matrix-nio has no cross-signing (matrix-nio#229); the few pieces the bot needs are here,
with the ``cryptography`` package for Ed25519, HKDF, AES-CTR and HMAC:

* ``bootstrap``: make the master, self-signing and user-signing keys, upload them (with
  the password when the homeserver asks), keep their private parts in secret storage
  (SSSS, account data encrypted with a new key) and return that key as a recovery key
  (printed once by ``gateway-bot matrix bootstrap-cross-signing``);
* ``sign_own_device``: with the recovery key, read the self-signing key back from secret
  storage and sign the bot's current device (done at every start, a no-op when signed).

Formats follow the spec: secrets are ``m.secret_storage.v1.aes-hmac-sha2`` (HKDF-SHA256
with a zero salt and the secret's name, AES-256-CTR, HMAC-SHA256), recovery keys are
base58 of ``8B 01 || key || parity``, signatures are over canonical JSON.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import secrets
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from gateway_bot.channels.matrix.api import MatrixApi, MatrixError

log = logging.getLogger(__name__)

JsonDict = dict[str, Any]

_CLIENT = "/_matrix/client/v3"
_ALGORITHM = "m.secret_storage.v1.aes-hmac-sha2"
_B58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
_PREFIX = b"\x8b\x01"
SECRETS = ("master", "self_signing", "user_signing")


class CrossSigningError(Exception):
    """Secret storage or the homeserver refused; the message says what to do."""


# -- encodings --------------------------------------------------------------------------


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text + "=" * (-len(text) % 4))


def canonical_json(value: JsonDict) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode()


def _base58(data: bytes) -> str:
    number = int.from_bytes(data, "big")
    text = ""
    while number:
        number, digit = divmod(number, 58)
        text = _B58[digit] + text
    return "1" * (len(data) - len(data.lstrip(b"\0"))) + text


def _unbase58(text: str) -> bytes:
    number = 0
    for char in text:
        if char not in _B58:
            raise CrossSigningError(f"the recovery key has a character it cannot have: {char!r}")
        number = number * 58 + _B58.index(char)
    raw = number.to_bytes((number.bit_length() + 7) // 8, "big")
    return b"\0" * (len(text) - len(text.lstrip("1"))) + raw


def encode_recovery_key(key: bytes) -> str:
    data = _PREFIX + key
    parity = 0
    for byte in data:
        parity ^= byte
    text = _base58(data + bytes([parity]))
    return " ".join(text[i : i + 4] for i in range(0, len(text), 4))


def decode_recovery_key(recovery_key: str) -> bytes:
    data = _unbase58("".join(recovery_key.split()))
    parity = 0
    for byte in data:
        parity ^= byte
    if len(data) != 35 or data[:2] != _PREFIX or parity != 0:
        raise CrossSigningError("that is not a recovery key (wrong length, prefix or parity)")
    return data[2:34]


# -- secret storage ---------------------------------------------------------------------


def _keys_for(key: bytes, name: str) -> tuple[bytes, bytes]:
    derived = HKDF(algorithm=hashes.SHA256(), length=64, salt=bytes(32), info=name.encode())
    material = derived.derive(key)
    return material[:32], material[32:]


def encrypt_secret(key: bytes, name: str, secret: str) -> JsonDict:
    aes_key, mac_key = _keys_for(key, name)
    iv = bytearray(secrets.token_bytes(16))
    iv[8] &= 0x7F  # the spec clears bit 63 so the counter never wraps
    encryptor = Cipher(algorithms.AES(aes_key), modes.CTR(bytes(iv))).encryptor()
    ciphertext = encryptor.update(secret.encode()) + encryptor.finalize()
    mac = hmac.new(mac_key, ciphertext, hashlib.sha256).digest()
    return {"iv": _b64(bytes(iv)), "ciphertext": _b64(ciphertext), "mac": _b64(mac)}


def decrypt_secret(key: bytes, name: str, encrypted: JsonDict) -> str:
    aes_key, mac_key = _keys_for(key, name)
    ciphertext = _unb64(str(encrypted["ciphertext"]))
    mac = hmac.new(mac_key, ciphertext, hashlib.sha256).digest()
    if not hmac.compare_digest(mac, _unb64(str(encrypted["mac"]))):
        raise CrossSigningError(f"{name}: the recovery key does not open secret storage")
    decryptor = Cipher(algorithms.AES(aes_key), modes.CTR(_unb64(str(encrypted["iv"])))).decryptor()
    return (decryptor.update(ciphertext) + decryptor.finalize()).decode()


# -- keys ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class SigningKey:
    private: Ed25519PrivateKey

    @classmethod
    def generate(cls) -> SigningKey:
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def from_secret(cls, secret: str) -> SigningKey:
        return cls(Ed25519PrivateKey.from_private_bytes(_unb64(secret)))

    @property
    def public(self) -> str:
        raw = self.private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        return _b64(raw)

    @property
    def secret(self) -> str:
        from cryptography.hazmat.primitives.serialization import NoEncryption, PrivateFormat

        raw = self.private.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
        return _b64(raw)

    def sign(self, user_id: str, value: JsonDict) -> JsonDict:
        """``value`` with this key's signature added (over it without signatures/unsigned)."""
        unsigned = {k: v for k, v in value.items() if k not in ("signatures", "unsigned")}
        signature = _b64(self.private.sign(canonical_json(unsigned)))
        signatures = dict(value.get("signatures") or {})
        signatures[user_id] = {**signatures.get(user_id, {}), f"ed25519:{self.public}": signature}
        return {**value, "signatures": signatures}


def _cross_signing_key(user_id: str, usage: str, key: SigningKey) -> JsonDict:
    return {"user_id": user_id, "usage": [usage], "keys": {f"ed25519:{key.public}": key.public}}


def _account_data_path(user_id: str, event_type: str) -> str:
    return f"{_CLIENT}/user/{quote(user_id, safe='')}/account_data/{quote(event_type, safe='')}"


async def _upload_keys(api: MatrixApi, body: JsonDict, user_id: str, password: str | None) -> None:
    """Upload cross-signing keys, answering the homeserver's password challenge if any."""
    path = f"{_CLIENT}/keys/device_signing/upload"
    try:
        await api.call("POST", path, body=body)
        return
    except MatrixError as exc:
        if exc.status != 401:
            raise
        session = exc.body.get("session")
    if password is None:
        raise CrossSigningError(
            "the homeserver wants the bot's password to upload cross-signing keys; "
            "configure matrix.password for bootstrapping"
        )
    auth = {
        "type": "m.login.password",
        "identifier": {"type": "m.id.user", "user": user_id},
        "password": password,
        "session": session,
    }
    await api.call("POST", path, body={**body, "auth": auth})


async def bootstrap(api: MatrixApi, user_id: str, password: str | None) -> str:
    """New cross-signing identity for ``user_id`` in new secret storage; the recovery key."""
    master, self_signing, user_signing = (SigningKey.generate() for _ in range(3))
    body = {
        "master_key": _cross_signing_key(user_id, "master", master),
        "self_signing_key": master.sign(
            user_id, _cross_signing_key(user_id, "self_signing", self_signing)
        ),
        "user_signing_key": master.sign(
            user_id, _cross_signing_key(user_id, "user_signing", user_signing)
        ),
    }
    await _upload_keys(api, body, user_id, password)
    storage_key = secrets.token_bytes(32)
    key_id = secrets.token_urlsafe(24)
    check = encrypt_secret(storage_key, "", "\0" * 32)
    description = {"algorithm": _ALGORITHM, "iv": check["iv"], "mac": check["mac"]}
    await api.call(
        "PUT", _account_data_path(user_id, f"m.secret_storage.key.{key_id}"), body=description
    )
    for name, key in zip(SECRETS, (master, self_signing, user_signing), strict=True):
        secret_name = f"m.cross_signing.{name}"
        encrypted = {"encrypted": {key_id: encrypt_secret(storage_key, secret_name, key.secret)}}
        await api.call("PUT", _account_data_path(user_id, secret_name), body=encrypted)
    await api.call(
        "PUT", _account_data_path(user_id, "m.secret_storage.default_key"), body={"key": key_id}
    )
    log.info("matrix: cross-signing keys made for %s (master %s)", user_id, master.public)
    return encode_recovery_key(storage_key)


async def _read_secret(api: MatrixApi, user_id: str, name: str, storage_key: bytes) -> str:
    try:
        default = await api.call("GET", _account_data_path(user_id, "m.secret_storage.default_key"))
        stored = await api.call("GET", _account_data_path(user_id, name))
    except MatrixError as exc:
        if exc.status == 404:
            raise CrossSigningError(
                f"no {name} in secret storage: run `gateway-bot matrix bootstrap-cross-signing`"
            ) from exc
        raise
    encrypted = (stored.get("encrypted") or {}).get(str(default.get("key")))
    if not isinstance(encrypted, dict):
        raise CrossSigningError(f"{name} is not stored under the default secret storage key")
    return decrypt_secret(storage_key, name, encrypted)


async def sign_own_device(api: MatrixApi, user_id: str, device_id: str, recovery_key: str) -> bool:
    """Sign our device with the self-signing key from secret storage. False: it already
    was (nothing uploaded)."""
    storage_key = decode_recovery_key(recovery_key)
    self_signing = SigningKey.from_secret(
        await _read_secret(api, user_id, "m.cross_signing.self_signing", storage_key)
    )
    answer = await api.call(
        "POST", f"{_CLIENT}/keys/query", body={"device_keys": {user_id: [device_id]}}
    )
    published = ((answer.get("self_signing_keys") or {}).get(user_id) or {}).get("keys") or {}
    if f"ed25519:{self_signing.public}" not in published:
        raise CrossSigningError("the recovery key's self-signing key is not the account's")
    device = ((answer.get("device_keys") or {}).get(user_id) or {}).get(device_id)
    if not isinstance(device, dict):
        raise CrossSigningError(f"device {device_id} has no keys on the homeserver yet")
    if f"ed25519:{self_signing.public}" in (device.get("signatures") or {}).get(user_id, {}):
        return False
    signed = self_signing.sign(user_id, device)
    signed.pop("unsigned", None)
    result = await api.call(
        "POST", f"{_CLIENT}/keys/signatures/upload", body={user_id: {device_id: signed}}
    )
    if result.get("failures"):
        raise CrossSigningError(f"the homeserver refused the signature: {result['failures']}")
    log.info("matrix: device %s signed by the self-signing key %s", device_id, self_signing.public)
    return True
