"""Blobs as objects of an S3 bucket (AWS S3 or any S3-compatible server): :class:`S3BlobStore`.

The client is boto3: AWS maintains it, every S3-compatible server (MinIO, SeaweedFS, Ceph,
Garage, R2) is tested against it, and its transfer manager uploads a large file in parts of a
fixed size from the file itself, so memory stays bounded whatever the file's size. Credentials,
region and endpoint come from where boto3 reads them (``AWS_ACCESS_KEY_ID``, ``AWS_REGION``,
``AWS_ENDPOINT_URL_S3``, profiles); ``endpoint_url`` overrides the endpoint.

A key is spelled as on disk (:func:`~dms.storage.keys.segment_path`) under the store's prefix,
so one mapping serves both stores and an object's name is what an operator expects. An S3 PUT
is atomic: a reader sees the whole object or none. Large files are staged in a local directory
(by default the system's temporary directory) and uploaded from there.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, NoReturn

from dms.errors import NotFound, StorageError, ValidationError
from dms.storage.keys import check_prefix, key_of_names, spelled
from dms.storage.store import (
    CHUNK_BYTES,
    STAGING_GRACE,
    Content,
    StoredBlob,
    StoredObject,
    put_one,
    stage_into,
    sweep_directory,
)

if TYPE_CHECKING:
    from types_boto3_s3 import S3Client

#: Longest object key S3 accepts (bytes of UTF-8).
MAX_OBJECT_KEY_BYTES = 1024
#: Uploads at once, and the client's connections (one each).
UPLOAD_THREADS = 16
#: Files above this are uploaded in parts of this size (bounded memory per upload).
PART_BYTES = 8 << 20
_NOT_FOUND = 404  # the HTTP status of a missing object
#: The URL scheme of S3 locations (``s3://bucket/prefix``).
SCHEME = "s3://"


class S3BlobStore:
    """Blobs as objects of ``bucket``, their keys under ``prefix``.

    ``client``: a boto3 S3 client (default: one from boto3's own configuration, with
    ``endpoint_url`` if given). ``staging_dir``: where large files wait before their upload.
    """

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        client: S3Client | None = None,
        endpoint_url: str | None = None,
        staging_dir: str | Path | None = None,
    ) -> None:
        """Use ``bucket`` (it must exist); nothing is sent until the first call."""
        if not isinstance(bucket, str) or not bucket or "/" in bucket:
            raise ValidationError(f"an S3 bucket is a name without '/', not {bucket!r:.80}")
        if not isinstance(prefix, str) or prefix.startswith("/") or "//" in prefix:
            raise ValidationError(f"an S3 prefix is '' or segments, not {prefix!r:.80}")
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.client = client if client is not None else _client(endpoint_url)
        self.staging_dir = Path(staging_dir or tempfile.gettempdir()) / "dms-staging"

    @classmethod
    def from_location(cls, location: str, **kwargs: Any) -> S3BlobStore:
        """The store of ``s3://bucket/prefix``; keyword arguments as for the constructor."""
        if not location.startswith(SCHEME):
            raise ValidationError(f"an S3 location starts with {SCHEME}, not {location!r:.80}")
        bucket, _, prefix = location.removeprefix(SCHEME).partition("/")
        return cls(bucket, prefix, **kwargs)

    @property
    def location(self) -> str:
        """``s3://bucket/prefix``."""
        return f"{SCHEME}{self.bucket}/{self.prefix}"

    def object_key(self, storage_key: str) -> str:
        """The object key that holds (or would hold) the blob of ``storage_key``."""
        name = self.prefix + "/".join(spelled(storage_key))
        if len(name.encode()) > MAX_OBJECT_KEY_BYTES:
            raise ValidationError(
                f"storage key {storage_key!r:.80} is too long for S3: its object key would "
                f"have {len(name.encode())} bytes, over {MAX_OBJECT_KEY_BYTES}"
            )
        return name

    def exists(self, storage_key: str) -> bool:
        """Whether an object is stored under ``storage_key`` (a HEAD request)."""
        name = self.object_key(storage_key)
        try:
            self.client.head_object(Bucket=self.bucket, Key=name)
        except Exception as exc:
            if _status(exc) == _NOT_FOUND:
                return False
            self._fail(exc, f"checking {name!r}")
        return True

    def get(self, storage_key: str) -> bytes:
        """The content stored under ``storage_key``, or :class:`NotFound`."""
        return b"".join(self.stream(storage_key))

    def stream(self, storage_key: str) -> Iterator[bytes]:
        """The content in chunks as it arrives; :class:`NotFound` at once if there is none."""
        name = self.object_key(storage_key)
        try:
            body = self.client.get_object(Bucket=self.bucket, Key=name)["Body"]
        except Exception as exc:
            if _status(exc) == _NOT_FOUND:
                raise NotFound(f"no blob stored under {storage_key!r} in {self.location}") from None
            self._fail(exc, f"reading {name!r}")
        return self._chunks(body, name)

    def put(self, storage_key: str, content: bytes | bytearray | memoryview) -> StoredBlob:
        """Upload ``content`` under ``storage_key``."""
        return put_one(self, storage_key, content)

    def put_many(self, blobs: Sequence[tuple[str, Content]]) -> None:
        """Upload each content under its key, several at once; staged files are removed."""
        uploads = [(self.object_key(key), content) for key, content in blobs]
        if len(uploads) <= 1:
            for upload in uploads:
                self._upload(*upload)
            return
        with ThreadPoolExecutor(min(UPLOAD_THREADS, len(uploads))) as pool:
            list(pool.map(lambda upload: self._upload(*upload), uploads))

    def delete(self, storage_key: str) -> bool:
        """Remove the object of ``storage_key``; return whether there was one."""
        if not self.exists(storage_key):
            return False
        name = self.object_key(storage_key)
        self._call(lambda: self.client.delete_object(Bucket=self.bucket, Key=name), name)
        return True

    def objects(self, prefix: str) -> Iterator[StoredObject]:
        """The objects whose keys start with ``prefix``, page by page as S3 lists them."""
        below = self.prefix + ("/".join(spelled(check_prefix(prefix)[:-1])) + "/" if prefix else "")
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=below
        )
        try:
            for page in pages:
                for found in page.get("Contents", []):
                    key = key_of_names(found["Key"].removeprefix(self.prefix).split("/"))
                    if key is not None:
                        yield StoredObject(
                            storage_key=key,
                            size_bytes=found["Size"],
                            modified=found["LastModified"],
                        )
        except Exception as exc:
            self._fail(exc, f"listing {below!r}")

    def namespaces(self) -> list[str]:
        """The keys' first segments: the common prefixes one level below the store's."""
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=self.prefix, Delimiter="/"
        )
        found: list[str] = []
        try:
            for page in pages:
                for common in page.get("CommonPrefixes", []):
                    name = common["Prefix"].removeprefix(self.prefix).rstrip("/")
                    if (key := key_of_names([name])) is not None:
                        found.append(key)
        except Exception as exc:
            self._fail(exc, "listing the top level")
        return sorted(found)

    def stage(self, source: BinaryIO) -> Content:
        """Copy ``source`` into a local staging file, hashing it on the way."""
        return stage_into(self.staging_dir, source)

    def discard(self, content: Content) -> None:
        """Remove the staging file of ``content``, if it has one."""
        if content.staged is not None:
            content.staged.unlink(missing_ok=True)

    def sweep_staging(self, *, older_than: timedelta = STAGING_GRACE, dry_run: bool = False) -> int:
        """Remove (or count) local staging files older than ``older_than``."""
        return sweep_directory(self.staging_dir, older_than, dry_run=dry_run)

    def _upload(self, name: str, content: Content) -> None:
        if content.staged is None:
            data = content.data or b""
            self._call(
                lambda: self.client.put_object(Bucket=self.bucket, Key=name, Body=data), name
            )
            return
        staged = content.staged
        self._call(
            lambda: self.client.upload_file(
                str(staged), self.bucket, name, Config=_transfer_config()
            ),
            name,
        )
        staged.unlink(missing_ok=True)

    def _chunks(self, body: Any, name: str) -> Iterator[bytes]:
        try:
            with body:
                yield from body.iter_chunks(CHUNK_BYTES)
        except Exception as exc:
            self._fail(exc, f"reading {name!r}")

    def _call(self, request: Callable[[], object], name: str) -> None:
        try:
            request()
        except Exception as exc:
            self._fail(exc, f"writing {name!r}")

    def _fail(self, exc: Exception, doing: str) -> NoReturn:
        if not isinstance(exc, _store_errors()):
            raise exc  # ours (NotFound, ValidationError) or a defect: not the store's failure
        raise StorageError(f"{self.location}: {doing} failed: {exc}") from exc


def _status(exc: Exception) -> int | None:
    """The HTTP status of a boto3 ``ClientError``; ``None`` for any other failure."""
    response = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return None
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return status if isinstance(status, int) else None


def _store_errors() -> tuple[type[Exception], ...]:
    """What boto3 raises when the store fails: refused requests, the network, the transfer."""
    from boto3.exceptions import Boto3Error  # noqa: PLC0415 -- optional dependency (dms[s3])
    from botocore.exceptions import BotoCoreError, ClientError  # noqa: PLC0415 -- as above

    return (Boto3Error, BotoCoreError, ClientError, OSError)


def _client(endpoint_url: str | None) -> S3Client:
    try:
        import boto3  # noqa: PLC0415 -- optional dependency (dms[s3]), imported on demand
        from botocore.config import Config  # noqa: PLC0415 -- as above
    except ImportError as exc:
        raise StorageError("an S3 blob store needs boto3: pip install 'dms[s3]'") from exc
    config = Config(max_pool_connections=UPLOAD_THREADS, retries={"mode": "standard"})
    return boto3.client("s3", endpoint_url=endpoint_url, config=config)


def _transfer_config() -> Any:
    from boto3.s3.transfer import TransferConfig  # noqa: PLC0415 -- as in _client

    return TransferConfig(
        multipart_threshold=PART_BYTES, multipart_chunksize=PART_BYTES, max_concurrency=4
    )
