"""A registry's ``.proto`` text compiled into the ``FileDescriptorSet`` a plan pins (issue 30).

The compiler is ``protoc`` itself, as ``grpcio-tools`` ships it (``python -m grpc_tools.protoc``,
run as a child process so that its error text, with line and column, is kept): the text is written
to a temporary directory under a file name made from the subject, and compiled with the well-known
types (``google/protobuf/timestamp.proto`` and the rest, which ``grpcio-tools`` carries) on the
include path and ``--include_imports``, so the set holds every file the schema needs, dependencies
first. Schema references to other subjects are not resolved (the registry's ``references``): such a
schema is refused with its reason by the caller.

A registry also holds Protobuf schemas in the serialized form (the base64 of a
``FileDescriptorProto``, what confluent-kafka's Python ``ProtobufSerializer`` registers):
:func:`descriptor_of` takes those as they are, with the well-known files they import from
``protobuf``'s own descriptors, and compiles the text form.
"""

from __future__ import annotations

import base64
import binascii
import importlib
import importlib.resources
import re
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["ProtocError", "compile_proto", "descriptor_of"]

#: seconds protoc may take on one schema
TIMEOUT = 30.0
_NOT_NAME_CHAR = re.compile(r"[^A-Za-z0-9_.-]")


class ProtocError(ValueError):
    """``protoc`` refused the schema (its own messages, with line and column)."""


def compile_proto(text: str, subject: str) -> str:
    """The base64 of the ``FileDescriptorSet`` of ``text`` (the schema of ``subject``)."""
    name = (_NOT_NAME_CHAR.sub("_", subject) or "schema") + ".proto"
    well_known = str(importlib.resources.files("grpc_tools") / "_proto")
    with tempfile.TemporaryDirectory(prefix="sluice-protoc-") as tmp:
        source, out = Path(tmp) / name, Path(tmp) / "descriptor.pb"
        source.write_text(text, encoding="utf-8")
        command = [sys.executable, "-m", "grpc_tools.protoc", f"--proto_path={tmp}",
                   f"--proto_path={well_known}", f"--descriptor_set_out={out}", "--include_imports", name]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT, check=False)
        except subprocess.TimeoutExpired:
            raise ProtocError(f"protoc took more than {TIMEOUT:.0f} s on the schema of subject "
                              f"{subject!r}") from None
        if done.returncode != 0 or not out.exists():
            said = (done.stderr or done.stdout).strip().replace(f"{tmp}/", "")
            said = said or f"exit status {done.returncode}"
            raise ProtocError(f"the Protobuf schema of subject {subject!r} does not compile: {said}")
        return base64.b64encode(out.read_bytes()).decode()


#: the modules of the well-known files a serialized schema may import (``google/protobuf/*.proto``)
_WELL_KNOWN = ("any", "api", "duration", "empty", "field_mask", "source_context", "struct", "timestamp",
               "type", "wrappers")


def _serialized(text: str) -> bytes | None:
    """The bytes of a schema in the serialized form (base64, no whitespace), None for ``.proto`` text."""
    stripped = text.strip()
    if not stripped or any(c.isspace() for c in stripped):
        return None
    try:
        return base64.b64decode(stripped, validate=True)
    except (binascii.Error, ValueError):
        return None


def descriptor_of(text: str, subject: str) -> str:
    """The base64 ``FileDescriptorSet`` of a registry's Protobuf schema: ``.proto`` text compiled
    (:func:`compile_proto`), or a serialized ``FileDescriptorProto`` with the well-known files it
    imports."""
    raw = _serialized(text)
    if raw is None:
        return compile_proto(text, subject)
    from google.protobuf import descriptor_pb2, descriptor_pool
    from google.protobuf.message import DecodeError

    file = descriptor_pb2.FileDescriptorProto()
    try:
        file.ParseFromString(raw)
    except DecodeError as exc:
        raise ProtocError(f"the Protobuf schema of subject {subject!r} is neither .proto text nor a "
                          f"serialized FileDescriptorProto: {exc}") from None
    files = descriptor_pb2.FileDescriptorSet()
    for name in file.dependency:
        module = name.removeprefix("google/protobuf/").removesuffix(".proto")
        if not name.startswith("google/protobuf/") or module not in _WELL_KNOWN:
            raise ProtocError(f"the Protobuf schema of subject {subject!r} imports {name!r}, which is not a "
                              "well-known type: schema references are not supported yet")
        importlib.import_module(f"google.protobuf.{module}_pb2")
        dependency = descriptor_pb2.FileDescriptorProto()
        descriptor_pool.Default().FindFileByName(name).CopyToProto(dependency)
        files.file.append(dependency)
    files.file.append(file)
    return base64.b64encode(files.SerializeToString(deterministic=True)).decode()
