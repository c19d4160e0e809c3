"""One call to the Alibaba Cloud ECS RPC API through aliyun-python-sdk-core, with the
SDK's exceptions turned into ours and every trace of the AccessKey scrubbed.

Each call ends within ``EcsApi.limit``: the SDK's timeouts bound each socket read only, and
an endpoint that trickles its answer would otherwise hold the caller for ever.

The SDK itself logs a rejected signature at ERROR level, and the server's message quotes
the string it signed, which contains ``AccessKeyId``: a logging filter on the SDK's logger
and :func:`redact` on our own messages keep the key out of logs and status.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from aliyunsdkcore.acs_exception.exceptions import ClientException, ServerException
from aliyunsdkcore.auth.credentials import AccessKeyCredential, StsTokenCredential
from aliyunsdkcore.client import AcsClient
from aliyunsdkcore.request import RpcRequest

from autoscaler.bounded import Bound, Overran, sdk_call_limit
from autoscaler.clouds.base import (
    CloudApiError,
    CloudAuthError,
    CloudDataError,
    CloudError,
    CloudUnreachableError,
)

KEY_ID_VARS = ("ALIBABA_CLOUD_ACCESS_KEY_ID", "ALICLOUD_ACCESS_KEY")
SECRET_VARS = ("ALIBABA_CLOUD_ACCESS_KEY_SECRET", "ALICLOUD_SECRET_KEY")
TOKEN_VARS = ("ALIBABA_CLOUD_SECURITY_TOKEN", "ALICLOUD_SECURITY_TOKEN")
CREDENTIALS_HINT = (
    "set ALIBABA_CLOUD_ACCESS_KEY_ID and ALIBABA_CLOUD_ACCESS_KEY_SECRET "
    "(or ALICLOUD_ACCESS_KEY and ALICLOUD_SECRET_KEY)"
)
_AUTH_CODES = {
    "InvalidAccessKeyId.NotFound", "InvalidAccessKeyId", "InvalidAccessKeyId.Inactive",
    "SignatureDoesNotMatch", "InvalidAccessKeySecret", "IncompleteSignature",
    "InvalidSecurityToken.Expired", "InvalidSecurityToken.MalFormed", "Forbidden.RAM",
    "Forbidden", "Forbidden.AccessKeyDisabled",
}
_SDK_READING = (RecursionError, UnicodeDecodeError, TypeError)
# AccessKeyId, the STS token and the signature as they appear raw, percent-encoded once (URL)
# or twice (string to sign), and in the parameter dict the SDK logs at DEBUG.
_KEY_ID_RE = re.compile(r"((?:AccessKeyId|SecurityToken|Signature)"
                        r"(?:=|%3D|%253D|'\s*:\s*'|\"\s*:\s*\"))"
                        r"(?:(?!%26|%2526)[^&\s\"'])+", re.IGNORECASE)  # to the next & (encoded or not)


def redact(text: str, *secrets: str | None) -> str:
    text = _KEY_ID_RE.sub(r"\1***", text)
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text


class _RedactFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = redact(record.getMessage())
        record.args = None
        return True


for _name in ("aliyunsdkcore.client", "aliyunsdkcore.http.http_response"):
    _logger = logging.getLogger(_name)
    if not any(isinstance(f, _RedactFilter) for f in _logger.filters):
        _logger.addFilter(_RedactFilter())


def _network_cause(message: str) -> str:
    """The useful end of a requests/urllib3 error ("Connection refused", "timed out")."""
    found = re.search(r"\[Errno -?\d+\] ([^'\")]+)", message)
    if found:
        return found.group(1).strip()
    if "timed out" in message.lower():
        return "timed out"
    return message[:200]


@dataclass(frozen=True)
class Credentials:
    key_id: str
    secret: str
    token: str | None = None

    def __repr__(self) -> str:  # never show the secret, even in a traceback's locals
        return "Credentials(key_id='***', secret='***')"


def _first(env: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    return next((env[n] for n in names if env.get(n)), None)


def credentials_from_env(env: Mapping[str, str] | None = None) -> Credentials:
    env = os.environ if env is None else env
    key_id, secret = _first(env, KEY_ID_VARS), _first(env, SECRET_VARS)
    if not key_id or not secret:
        raise CloudAuthError(f"no Alibaba Cloud credentials in the environment: {CREDENTIALS_HINT}")
    return Credentials(key_id, secret, _first(env, TOKEN_VARS))


@dataclass(frozen=True)
class Endpoint:
    host: str  # host[:port], what RpcRequest.set_endpoint takes
    protocol: str  # http | https

    @classmethod
    def parse(cls, value: str) -> Endpoint:
        """``http://127.0.0.1:8080``, ``https://ecs.aliyuncs.com`` or a bare host (https)."""
        parts = urlsplit(value if "://" in value else f"https://{value}")
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise CloudError(f"bad Alibaba Cloud endpoint {value!r} (want http[s]://host[:port])")
        return cls(parts.netloc, parts.scheme)


class EcsApi:
    """Sends ECS RPC requests for one region; answers parsed JSON or raises a CloudError.

    Each call is given up on after ``limit`` seconds: per attempt (the first and
    ``max_retries`` more) the connect timeout and twice the read timeout, and the SDK's
    longest backoff before each retry; 52 s by default. While a call that overran
    still runs, the next fails at once (``autoscaler/bounded.py``)."""

    def __init__(self, region: str, credentials: Credentials, *, endpoint: Endpoint | None,
                 connect_timeout: float, read_timeout: float, max_retries: int):
        cred: AccessKeyCredential | StsTokenCredential
        if credentials.token:
            cred = StsTokenCredential(credentials.key_id, credentials.secret, credentials.token)
        else:
            cred = AccessKeyCredential(credentials.key_id, credentials.secret)
        self.region, self.endpoint = region, endpoint
        self._secrets = (credentials.key_id, credentials.secret, credentials.token)
        self._client = AcsClient(region_id=region, credential=cred,
                                 auto_retry=max_retries > 0, max_retry_time=max_retries,
                                 connect_timeout=connect_timeout, timeout=read_timeout)
        self.calls: dict[str, int] = {}
        self.limit = sdk_call_limit(connect_timeout, read_timeout, max_retries + 1)
        self._bound = Bound("ecs-call")

    def call(self, request: RpcRequest) -> dict[str, Any]:
        action = request.get_action_name()
        if self.endpoint is not None:
            request.set_endpoint(self.endpoint.host)
            request.set_protocol_type(self.endpoint.protocol)
        self.calls[action] = self.calls.get(action, 0) + 1
        where = self.endpoint.host if self.endpoint else f"the {self.region} ECS endpoint"
        try:
            body = self._bound.call("ecs", self.limit,
                                    lambda: self._client.do_action_with_exception(request))
        except Overran as exc:
            why = ("is still sending the answer to a call that overran its time: nothing sent"
                   if exc.still_running else f"did not finish its answer within {exc.limit:g}s")
            raise CloudUnreachableError(f"ECS {action}: {where} {why}") from None
        except ServerException as exc:
            code, msg = exc.get_error_code(), redact(exc.get_error_msg() or "", *self._secrets)
            if code in _AUTH_CODES:
                raise CloudAuthError(f"ECS {action}: credentials rejected ({code}): "
                                     f"{CREDENTIALS_HINT}") from None
            raise CloudApiError(code, f"ECS {action}: {msg}") from None
        except ClientException as exc:
            msg = redact(exc.get_error_msg() or "", *self._secrets)
            if exc.get_error_code() == "SDK.HttpError":
                raise CloudUnreachableError(
                    f"ECS {action}: cannot reach {where}: {_network_cause(msg)}") from None
            raise CloudError(f"ECS {action}: {exc.get_error_code()}: {msg}") from None
        except _SDK_READING as exc:
            # The SDK decodes every answer itself (for a RequestId, or an error's Code) and
            # lets these out: JSON nested too deeply, an error body that is not UTF-8 or a
            # number where it looks for a Code.
            raise CloudDataError(f"ECS {action}: {where} answered something that is not an "
                                 f"ECS response ({type(exc).__name__})") from None
        try:
            data = json.loads(body)
        except ValueError:
            raise CloudDataError(f"ECS {action}: answer is not JSON") from None
        except RecursionError:
            raise CloudDataError(f"ECS {action}: answer is JSON nested too deeply to read") from None
        if not isinstance(data, dict):
            raise CloudDataError(f"ECS {action}: answer is not a JSON object")
        return data
