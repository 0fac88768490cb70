"""Files amem writes (archives, backups): private, atomic, never replacing anything.

The data goes to a temporary file beside the target, created readable by its owner only
(0600, ``O_EXCL``) before a byte is written to it; it is fsynced, then linked to the
target name, which fails if the name exists (``target_exists``). If anything fails, the
temporary file and SQLite's companions of it (``-journal``, ``-wal``, ``-shm``) are
removed. The target's folder is resolved (symlinks and ``..`` included) before anything is
checked, so ``root`` confines the folder a path really leads to; a symlink at the target
itself is never followed (``path_not_allowed``).

A process killed while writing (kill -9, a crash) cannot remove its temporary file, a
full copy of the database, so each name says who made it:
``.{target}.{uuid}.{pid}.{host}.tmp``, and the database records it (``temp_files``) until
it is published or removed. Whenever a process opens the database, and after every
erasure, it removes the recorded files whose process no longer runs
(``sweep_recorded``); before writing into a directory, amem also removes the temporary
files there that it named itself on this machine and whose process is gone. A live
export's file is never touched, however long it runs, and a file made on another machine
(``host`` is a digest of the host name) is left alone: its pid means nothing here.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import socket
import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from ..db.times import db_now
from ..db.writer import immediate
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


def temp_name(target: Path) -> Path:
    """The name of a new temporary file beside ``target``, saying who makes it."""
    return target.with_name(f".{target.name}.{uuid.uuid4().hex}.{os.getpid()}.{HOST}.tmp")


@contextmanager
def private_temp(temp: Path) -> Iterator[Path]:
    """Create ``temp`` (a ``temp_name``) new, empty and owner-only, and remove it (with its
    companions) on leaving unless ``publish`` gave it the target name.

    Stale temporary files of amem's own in its directory are removed first."""
    sweep_stale(temp.parent)
    os.close(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    try:
        yield temp
    finally:
        remove_with_companions(temp)


INSERT_TEMP_FILE = "insert into temp_files (path, created_at) values (?, ?)"
DELETE_TEMP_FILE = "delete from temp_files where path = ?"
SELECT_TEMP_FILES = "select path from temp_files"


def record(conn: sqlite3.Connection, temp: Path) -> None:
    """Record that this process is about to write ``temp`` (before it exists)."""
    conn.execute(INSERT_TEMP_FILE, (str(temp), db_now()))


def forget(conn: sqlite3.Connection, temp: Path) -> None:
    """``temp`` was published or removed."""
    conn.execute(DELETE_TEMP_FILE, (str(temp),))


def sweep_recorded(conn: sqlite3.Connection) -> int:
    """Remove the recorded temporary files whose process is gone, and their records;
    how many records went. Runs outside a transaction (the writer's idle chore): the
    files go first, so a crash in between leaves a record of nothing, swept next time."""
    stale = [path for (path,) in conn.execute(SELECT_TEMP_FILES).fetchall() if abandoned(path)]
    for path in stale:
        if TEMP_NAME.fullmatch(Path(path).name):  # never a file amem did not name
            remove_with_companions(Path(path))
    if stale:
        with immediate(conn):
            conn.executemany(DELETE_TEMP_FILE, [(path,) for path in stale])
    return len(stale)


def abandoned(temp: str) -> bool:
    """Whether the recorded ``temp`` was made on this machine by a process that no
    longer runs (or is not a name amem makes at all)."""
    named = TEMP_NAME.fullmatch(Path(temp).name)
    return named is None or (named["host"] == HOST and not running(int(named["pid"])))


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
