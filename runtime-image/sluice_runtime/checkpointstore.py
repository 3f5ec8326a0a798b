"""Where a driver's checkpoint lives: a volume (a local directory) or an object store (``s3a://``).

The runtime reads and arranges checkpoint files itself in a few places (the checkpoint epochs,
the drain's last offsets and commits, the start point and its backstops, a replace's hand-off,
the clean-up of retired versions, the exactly-once sink's checkpoint id). They go through a
:class:`CheckpointStore`, chosen by the checkpoint's location (:func:`store_for`):

* :class:`LocalStore`: a directory on the state volume, behaving as the runtime always did (a
  "copy" is a hard link: Spark never rewrites a checkpoint file in place, so an epoch shares its
  files with the one it was made from; a write goes to a temporary name, then is renamed);
* :class:`S3Store`: ``s3a://<bucket>/<prefix>``, through the AWS SDK v2 client of Hadoop's S3A
  file system **in the driver's JVM** (py4j): the client Spark's own checkpoint writes use, with
  the same endpoint, path style, region and credentials chain (``spark.hadoop.fs.s3a.*``, derived
  once from the environment by :func:`sluice_runtime.config.object_store_conf`).

Why the JVM's client and not a Python S3 client (boto3): the credentials and endpoint settings
stay in one place (Hadoop's configuration, which Spark needs anyway), so what the runtime reads
and writes is what Spark reads and writes, including under workload identity; no new dependency
enters the runtime. Every code path that touches the checkpoint runs after the SparkSession
exists (the epoch is prepared when a driver takes the Lease, long after ``create_spark``; a
driver without election starts its session before the pipeline), so the JVM is always there.
Hadoop's ``FileSystem`` API alone would not do: it has no server-side copy (``FileUtil.copy``
streams every byte through the driver) and its conditional create (``createFile().overwrite
(false)``, ``fs.s3a.create.conditional.enabled`` in Hadoop 3.5) is tied to its performance-mode
settings; the SDK client it exposes (``getS3AInternals().getAmazonS3Client()``) gives both
directly: ``CopyObject`` and ``PutObject`` with ``If-None-Match: *``.

Paths are strings: a filesystem path, or an ``s3a://`` URI (``pathlib`` would fold its ``//``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

SCHEME = "s3a://"

#: what this runtime names the S3 client in Hadoop's audit log
CLIENT_PURPOSE = "sluice checkpoint store"
#: S3's limit for one CopyObject: a larger object (a RocksDB snapshot of a large state) is copied
#: in parts of :data:`MULTIPART_PART_SIZE` (S3: 5 MiB to 5 GiB each, at most 10,000 parts)
MULTIPART_COPY_THRESHOLD = 5 * 1024**3
MULTIPART_PART_SIZE = 512 * 1024**2
MAX_PARTS = 10_000


def copy_ranges(size: int, part_size: int) -> list[tuple[int, int]]:
    """The inclusive byte ranges of a copy of ``size`` bytes in parts of ``part_size`` (larger parts
    when that would make more than :data:`MAX_PARTS`)."""
    if size <= 0:
        raise ValueError("a multipart copy needs at least one byte")
    part = max(part_size, -(-size // MAX_PARTS))
    return [(start, min(start + part, size) - 1) for start in range(0, size, part)]


@dataclass(frozen=True)
class Entry:
    """An object (a file) under a listed prefix."""

    key: str  # relative to the prefix listed, '/'-separated
    size: int
    mtime: float  # seconds since the epoch


def is_object_store(location: str | Path) -> bool:
    return str(location).startswith(SCHEME)


def split_uri(uri: str) -> tuple[str, str]:
    """(bucket, key) of ``s3a://bucket/key`` (the key without a trailing ``/``)."""
    if not is_object_store(uri):
        raise ValueError(f"not an s3a:// location: {uri!r}")
    bucket, _, key = uri[len(SCHEME):].partition("/")
    if not bucket:
        raise ValueError(f"no bucket in {uri!r}")
    return bucket, key.strip("/")


def join(base: str | Path, *parts: str) -> str:
    """``base/part/...`` for either kind of location."""
    if is_object_store(base):
        return "/".join([str(base).rstrip("/"), *[p.strip("/") for p in parts]])
    return os.path.join(str(base), *parts)


def parent(location: str | Path) -> str:
    text = str(location).rstrip("/")
    if is_object_store(text):
        return text.rpartition("/")[0]
    return os.path.dirname(text)


def name(location: str | Path) -> str:
    return str(location).rstrip("/").rpartition("/")[2]


class CheckpointStore(Protocol):
    """The operations the runtime needs on checkpoint files (all paths absolute)."""

    def listing(self, prefix: str) -> list[Entry]:
        """Every object under ``prefix`` (recursive), keys relative to it; [] when none."""

    def names(self, prefix: str) -> list[str]:
        """The names directly under ``prefix`` (files and "directories"); [] when none."""

    def read(self, path: str) -> bytes | None:
        """A small object's bytes; None when it does not exist."""

    def exists(self, path: str) -> bool: ...

    def mtime(self, path: str) -> float | None:
        """Its modification time (seconds since the epoch), None when it does not exist."""

    def write(self, path: str, data: bytes) -> None:
        """Write (or replace) the whole object: a reader sees the old bytes or the new ones."""

    def create_if_absent(self, path: str, data: bytes) -> bool:
        """Create the object only if it does not exist (atomically); False when it did."""

    def copy(self, src: str, dst: str, size: int | None = None) -> bool:
        """Copy an object (on a volume: a hard link); False when ``src`` is gone. ``size``: its
        size when the caller listed it (an object store copies a large one in parts)."""

    def delete(self, path: str) -> None:
        """Delete one object (gone already is fine)."""

    def delete_prefix(self, prefix: str) -> None:
        """Delete everything under ``prefix`` (gone already is fine)."""

    def size(self, prefix: str) -> int:
        """Bytes of every object under ``prefix``."""


class LocalStore:
    """A checkpoint on a volume: plain files, hard links for copies."""

    def listing(self, prefix: str) -> list[Entry]:
        root = Path(prefix)
        out = []
        for dirpath, _dirs, files in os.walk(root):
            for file in files:
                path = Path(dirpath) / file
                try:
                    st = path.stat()
                except FileNotFoundError:
                    continue
                out.append(Entry(path.relative_to(root).as_posix(), st.st_size, st.st_mtime))
        return sorted(out, key=lambda e: e.key)

    def names(self, prefix: str) -> list[str]:
        root = Path(prefix)
        return sorted(p.name for p in root.iterdir()) if root.is_dir() else []

    def read(self, path: str) -> bytes | None:
        try:
            return Path(path).read_bytes()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None

    def exists(self, path: str) -> bool:
        return Path(path).exists()

    def mtime(self, path: str) -> float | None:
        try:
            return Path(path).stat().st_mtime
        except FileNotFoundError:
            return None

    def write(self, path: str, data: bytes) -> None:
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = target.with_name(f".{target.name}.tmp")
        staging.write_bytes(data)
        os.replace(staging, target)  # a new inode: an epoch linked from this one keeps its own

    def create_if_absent(self, path: str, data: bytes) -> bool:
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        return True

    def copy(self, src: str, dst: str, size: int | None = None) -> bool:
        Path(dst).parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(src, dst)
        except FileNotFoundError:
            return False
        return True

    def delete(self, path: str) -> None:
        Path(path).unlink(missing_ok=True)

    def delete_prefix(self, prefix: str) -> None:
        import shutil

        shutil.rmtree(prefix, ignore_errors=True)

    def size(self, prefix: str) -> int:
        return sum(e.size for e in self.listing(prefix))


class S3Error(RuntimeError):
    """An S3 request failed (other than a missing object or a refused condition)."""


def _status(exc: BaseException) -> int | None:
    """The HTTP status of an SDK exception raised through py4j (None: not an S3 error)."""
    java = getattr(exc, "java_exception", None)
    if java is None:
        return None
    try:
        return int(java.statusCode())
    except Exception:
        return None


class S3Store:
    """A checkpoint in an S3 bucket, through the S3A file system's SDK client in the driver's JVM.

    ``jvm``: py4j's JVM view; ``hadoop_conf``: the Hadoop configuration Spark uses (its
    ``fs.s3a.*`` settings choose endpoint, region and credentials)."""

    def __init__(self, jvm: Any, hadoop_conf: Any, *, multipart_threshold: int | None = None,
                 multipart_part_size: int | None = None) -> None:
        self.multipart_threshold = multipart_threshold or MULTIPART_COPY_THRESHOLD
        self.multipart_part_size = multipart_part_size or MULTIPART_PART_SIZE
        self._jvm = jvm
        self._conf = hadoop_conf
        self._clients: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._thread = threading.local()

    @classmethod
    def from_spark(cls) -> S3Store:
        """The store of the running SparkContext (the driver's JVM)."""
        from pyspark import SparkContext

        sc = SparkContext._active_spark_context
        if sc is None:
            raise S3Error("an s3a:// checkpoint is read through the driver's JVM: no SparkContext runs")
        return cls(sc._jvm, sc._jsc.hadoopConfiguration())

    # --- plumbing -------------------------------------------------------------------------------

    def _client(self, bucket: str) -> Any:
        with self._lock:
            client = self._clients.get(bucket)
            if client is None:
                fs = self._jvm.org.apache.hadoop.fs.Path(f"{SCHEME}{bucket}/").getFileSystem(self._conf)
                client = fs.getS3AInternals().getAmazonS3Client(CLIENT_PURPOSE)
                self._clients[bucket] = client
            return client

    def _sdk(self, bucket: str) -> Any:
        """The SDK's package view for this thread. py4j finds classes through the calling JVM
        thread's context class loader; the S3A jars may sit in Spark's class loader (``spark.jars``)
        rather than the system one, so each thread (py4j pins one JVM thread to each Python
        thread) first takes the class loader of the S3A client."""
        client = self._client(bucket)
        if not getattr(self._thread, "loader_set", False):
            loader = client.getClass().getClassLoader()
            self._jvm.java.lang.Thread.currentThread().setContextClassLoader(loader)
            self._thread.loader_set = True
        return self._jvm.software.amazon.awssdk

    def _model(self, bucket: str) -> Any:
        return self._sdk(bucket).services.s3.model

    def _put(self, path: str, data: bytes, *, if_none_match: bool) -> None:
        bucket, key = split_uri(path)
        builder = self._model(bucket).PutObjectRequest.builder().bucket(bucket).key(key)
        if if_none_match:
            builder = builder.ifNoneMatch("*")
        body = self._sdk(bucket).core.sync.RequestBody.fromBytes(bytearray(data))
        self._client(bucket).putObject(builder.build(), body)

    def _head(self, path: str) -> Any | None:
        bucket, key = split_uri(path)
        request = self._model(bucket).HeadObjectRequest.builder().bucket(bucket).key(key).build()
        try:
            return self._client(bucket).headObject(request)
        except Exception as exc:
            if _status(exc) == 404:
                return None
            raise

    def _pages(self, prefix: str, delimiter: str | None) -> Iterator[Any]:
        bucket, key = split_uri(prefix)
        key_prefix = f"{key}/" if key else ""
        token: str | None = None
        while True:
            builder = self._model(bucket).ListObjectsV2Request.builder().bucket(bucket).prefix(key_prefix)
            if delimiter:
                builder = builder.delimiter(delimiter)
            if token:
                builder = builder.continuationToken(token)
            response = self._client(bucket).listObjectsV2(builder.build())
            yield response
            if not response.isTruncated():
                return
            token = str(response.nextContinuationToken())

    # --- the store ------------------------------------------------------------------------------

    def listing(self, prefix: str) -> list[Entry]:
        _, key = split_uri(prefix)
        skip = len(key) + 1 if key else 0
        out = []
        for page in self._pages(prefix, None):
            for obj in page.contents():
                full = str(obj.key())
                if full.endswith("/"):
                    continue  # a directory marker of S3A's mkdirs, not a file
                out.append(Entry(full[skip:], int(obj.size()), obj.lastModified().toEpochMilli() / 1000))
        return out

    def names(self, prefix: str) -> list[str]:
        _, key = split_uri(prefix)
        skip = len(key) + 1 if key else 0
        found: set[str] = set()
        for page in self._pages(prefix, "/"):
            for obj in page.contents():
                rest = str(obj.key())[skip:]
                if rest:
                    found.add(rest)
            for common in page.commonPrefixes():
                found.add(str(common.prefix())[skip:].rstrip("/"))
        return sorted(found)

    def read(self, path: str) -> bytes | None:
        bucket, key = split_uri(path)
        request = self._model(bucket).GetObjectRequest.builder().bucket(bucket).key(key).build()
        try:
            return bytes(self._client(bucket).getObjectAsBytes(request).asByteArray())
        except Exception as exc:
            if _status(exc) == 404:
                return None
            raise

    def exists(self, path: str) -> bool:
        return self._head(path) is not None

    def mtime(self, path: str) -> float | None:
        head = self._head(path)
        return None if head is None else head.lastModified().toEpochMilli() / 1000

    def write(self, path: str, data: bytes) -> None:
        self._put(path, data, if_none_match=False)

    def create_if_absent(self, path: str, data: bytes) -> bool:
        try:
            self._put(path, data, if_none_match=True)
        except Exception as exc:
            # 412: it exists; 409: a concurrent conditional write of the same key is in flight
            if _status(exc) in (409, 412):
                return False
            raise
        return True

    def copy(self, src: str, dst: str, size: int | None = None) -> bool:
        """A server-side copy: ``CopyObject`` up to :data:`MULTIPART_COPY_THRESHOLD` bytes (S3 refuses
        a single copy of more than 5 GiB), in parts (``UploadPartCopy``) above it."""
        src_bucket, src_key = split_uri(src)
        dst_bucket, dst_key = split_uri(dst)
        try:
            if size is not None and size > self.multipart_threshold:
                self._copy_in_parts(src_bucket, src_key, dst_bucket, dst_key, size)
                return True
            request = (self._model(dst_bucket).CopyObjectRequest.builder()
                       .sourceBucket(src_bucket).sourceKey(src_key)
                       .destinationBucket(dst_bucket).destinationKey(dst_key).build())
            self._client(dst_bucket).copyObject(request)
        except Exception as exc:
            if _status(exc) == 404:
                return False  # purged since it was listed
            raise
        return True

    def _copy_in_parts(self, src_bucket: str, src_key: str, dst_bucket: str, dst_key: str, size: int) -> None:
        """A multipart upload whose parts are server-side copies of byte ranges of the source;
        aborted (nothing left behind) when a part fails."""
        model, client = self._model(dst_bucket), self._client(dst_bucket)
        created = client.createMultipartUpload(model.CreateMultipartUploadRequest.builder()
                                               .bucket(dst_bucket).key(dst_key).build())
        upload_id = created.uploadId()
        try:
            parts = self._jvm.java.util.ArrayList()
            for number, (first, last) in enumerate(copy_ranges(size, self.multipart_part_size), start=1):
                answer = client.uploadPartCopy(
                    model.UploadPartCopyRequest.builder().sourceBucket(src_bucket).sourceKey(src_key)
                    .destinationBucket(dst_bucket).destinationKey(dst_key).uploadId(upload_id)
                    .partNumber(number).copySourceRange(f"bytes={first}-{last}").build())
                parts.add(model.CompletedPart.builder().partNumber(number)
                          .eTag(answer.copyPartResult().eTag()).build())
            upload = model.CompletedMultipartUpload.builder().parts(parts).build()
            client.completeMultipartUpload(model.CompleteMultipartUploadRequest.builder()
                                           .bucket(dst_bucket).key(dst_key).uploadId(upload_id)
                                           .multipartUpload(upload).build())
        except BaseException:
            try:
                client.abortMultipartUpload(model.AbortMultipartUploadRequest.builder()
                                            .bucket(dst_bucket).key(dst_key).uploadId(upload_id).build())
            except Exception:  # the part's error is the one to tell
                pass
            raise

    def delete(self, path: str) -> None:
        bucket, key = split_uri(path)
        request = self._model(bucket).DeleteObjectRequest.builder().bucket(bucket).key(key).build()
        self._client(bucket).deleteObject(request)  # S3 answers 204 for a missing key too

    def delete_prefix(self, prefix: str) -> None:
        bucket, key = split_uri(prefix)
        if not key:
            raise S3Error(f"refusing to delete a whole bucket: {prefix}")
        # every key under it, S3A's directory markers (keys ending in '/') included
        keys = [str(obj.key()) for page in self._pages(prefix, None) for obj in page.contents()]
        keys.append(f"{key}/")  # the prefix's own marker, if any
        model = self._model(bucket)
        for start in range(0, len(keys), 1000):
            ids = self._jvm.java.util.ArrayList()
            for one in keys[start:start + 1000]:
                ids.add(model.ObjectIdentifier.builder().key(one).build())
            delete = model.Delete.builder().objects(ids).quiet(True).build()
            request = model.DeleteObjectsRequest.builder().bucket(bucket).delete(delete).build()
            self._client(bucket).deleteObjects(request)

    def size(self, prefix: str) -> int:
        return sum(e.size for e in self.listing(prefix))


LOCAL = LocalStore()
_s3: S3Store | None = None
_s3_lock = threading.Lock()


def store_for(location: str | Path) -> CheckpointStore:
    """The store of a checkpoint location (an ``s3a://`` URI needs the driver's SparkContext)."""
    global _s3
    if not is_object_store(location):
        return LOCAL
    with _s3_lock:
        if _s3 is None:
            _s3 = S3Store.from_spark()
        return _s3


def use_store(store: S3Store | None) -> None:
    """Set (or forget, with None) the object store :func:`store_for` answers with: a JVM started
    without a SparkContext (tests), or a new SparkContext."""
    global _s3
    with _s3_lock:
        _s3 = store
