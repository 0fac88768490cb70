"""Files amem writes (archives, backups): private, atomic, never replacing anything.

The data goes to a temporary file beside the target, created readable by its owner only
(0600, ``O_EXCL``) before a byte is written to it; it is fsynced, then linked to the
target name, which fails if the name exists (``target_exists``). If anything fails, the
temporary file and SQLite's companions of it (``-journal``, ``-wal``, ``-shm``) are
removed. The target's folder is resolved (symlinks and ``..`` included) before anything is
checked, so ``root`` confines the folder a path really leads to; a symlink at the target
itself is never followed (``path_not_allowed``).

A process killed while writing (kill -9, a crash) cannot remove its temporary file, so
each name says who made it: ``.{target}.{uuid}.{pid}.{host}.tmp``. Before writing into a
directory, amem removes the temporary files there that it named itself on this machine
(``host`` is a digest of the host name) and whose process no longer runs: a live
export's file is never touched, however long it runs, and a file made on another machine
sharing the directory is left alone (its pid means nothing here).
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import socket
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from ..errors import InvalidInput, StorageError

HOST = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]
COMPANIONS = ("-journal", "-wal", "-shm")
TEMP_NAME = re.compile(
    r"\..+\.[0-9a-f]{32}\.(?P<pid>[0-9]+)\.(?P<host>[0-9a-f]{8})\.tmp(-journal|-wal|-shm)?"
)


def checked_target(path: str | os.PathLike[str], root: str | os.PathLike[str] | None) -> Path:
    """The absolute target path in its resolved folder, refused if that folder is missing
    or outside ``root``, or if the target is a symlink or exists."""
    try:
        path = Path(path).expanduser()
    except RuntimeError:  # ~name of a user without a home directory
        raise InvalidInput(
            "the path starts with a home directory ('~') that cannot be found",
            code="path_not_allowed",
        ) from None
    try:
        parent = path.absolute().parent.resolve(strict=True)
    except (FileNotFoundError, NotADirectoryError):
        raise InvalidInput("the target directory does not exist", code="path_not_allowed") from None
    except (OSError, RuntimeError) as exc:  # a symlink loop is a RuntimeError before 3.13
        reason = exc.strerror if isinstance(exc, OSError) else "a symlink loop"
        raise InvalidInput(
            f"the target directory cannot be resolved ({reason})", code="path_not_allowed"
        ) from None
    if root is not None and not parent.is_relative_to(Path(root).resolve()):
        raise InvalidInput("the path leads outside the allowed directory", code="path_not_allowed")
    target = parent / path.name
    try:
        if target.is_symlink():
            raise InvalidInput(
                "the target is a symlink; amem does not follow it", code="path_not_allowed"
            )
        exists = target.exists()
    except OSError as exc:  # e.g. a file name longer than the file system allows
        raise InvalidInput(
            f"the target name cannot be used ({exc.strerror})", code="path_not_allowed"
        ) from None
    if exists:
        raise StorageError("the target file exists; amem never overwrites", code="target_exists")
    return target


@contextmanager
def private_temp(target: Path) -> Iterator[Path]:
    """A new, empty, owner-only temporary file beside ``target``, removed (with its
    companions) on leaving unless ``publish`` gave it the target name.

    Stale temporary files of amem's own in the directory are removed first."""
    sweep_stale(target.parent)
    temp = target.with_name(f".{target.name}.{uuid.uuid4().hex}.{os.getpid()}.{HOST}.tmp")
    os.close(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    try:
        yield temp
    finally:
        remove_with_companions(temp)


def remove_with_companions(temp: Path) -> None:
    for path in (temp, *(Path(f"{temp}{suffix}") for suffix in COMPANIONS)):
        with suppress(OSError):
            path.unlink(missing_ok=True)


def sweep_stale(directory: Path) -> int:
    """Remove amem's temporary files in ``directory`` whose process is gone; how many."""
    removed = 0
    with suppress(OSError), os.scandir(directory) as entries:
        for entry in entries:
            named = TEMP_NAME.fullmatch(entry.name)
            if named and named["host"] == HOST and not running(int(named["pid"])):
                with suppress(OSError):
                    os.unlink(entry.path)
                    removed += 1
    return removed


def running(pid: int) -> bool:
    """Whether a process with this id exists on this machine (signal 0 only checks)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):  # another user's process; an impossible id
        return True  # either way, not provably gone: keep the file
    return True


def publish(temp: Path, target: Path) -> None:
    """fsync ``temp`` and give it the ``target`` name, which must not exist yet."""
    with open(temp, "rb+") as handle:
        os.fsync(handle.fileno())
    try:
        os.link(temp, target)  # unlike rename, never replaces an existing file
    except FileExistsError:
        raise StorageError(
            "the target file exists; amem never overwrites", code="target_exists"
        ) from None
    finally:
        temp.unlink(missing_ok=True)
    directory = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def os_error(what: str, exc: OSError) -> StorageError:
    """A failed file write; the partial file is always removed by the caller."""
    return StorageError(
        f"{what} ({exc.strerror or 'I/O error'}); no partial file is left",
        code=os_error_code(exc),
    )


def os_failure(exc: OSError) -> StorageError:
    """An OS error that nothing more specific explained, as an amem error with a stable
    code; like every amem message, it does not repeat the path."""
    reason = exc.strerror or type(exc).__name__
    return StorageError(f"a file operation failed ({reason})", code=os_error_code(exc))


def os_error_code(exc: OSError) -> str:
    """``storage_full`` when no space or quota is left, else ``storage_error``."""
    full = exc.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)
    return "storage_full" if full else "storage_error"
