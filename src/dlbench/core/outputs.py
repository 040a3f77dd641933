"""Every file dlbench writes for a user goes through here (the site, a report, ``export --out``,
``compare --html``, ``history --plot``, the survey's files, profile traces and the directories of a
run's kept files), so that a write stays where the user told it to go.

A folder the user names may hold what someone else put there (a shared ``/tmp``, a CI workspace): a
symbolic link ``DIR/index.html -> ~/.bashrc`` or ``DIR/runs -> ~/projects`` would turn a report into
an overwrite of a file that is not ours. So:

* nothing *inside* the named folder is followed: a file or subfolder to be written that is a
  symbolic link is refused (:class:`UsageError`, one line naming it), or, in a folder that is
  dlbench's own (``own=True``: the site's marker file), the link itself is removed (never its
  target) and a real file or folder takes its place;
* the named folder itself and every directory above it are followed, as any tool follows a path it
  is given (``--out /tmp/link-to-dir/report``);
* no file is written over the results database, its ``-wal``/``-shm``/``-journal`` files, or any
  other SQLite file (:func:`check_output`);
* every path of a command is checked before its first file is written: a refusal leaves nothing
  behind;
* each file is written under a temporary name in its own folder and renamed into place
  (``os.replace`` renames a directory entry: over a link planted after the check it replaces the
  link, not its target), so a crash never leaves half a file. Directories are walked with
  ``O_NOFOLLOW`` descriptors, so a link swapped in between the check and the write is refused too.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path, PurePosixPath

from dlbench.core.errors import UsageError

SQLITE_HEADER = b"SQLite format 3\x00"
#: files SQLite keeps beside a database while it is open (WAL) or in a transaction (rollback journal)
SIDECARS = ("-wal", "-shm", "-journal")


def is_sqlite(path: Path) -> bool:
    """Whether ``path`` is a readable file that starts as every SQLite database does."""
    try:
        with open(path, "rb") as f:
            return f.read(16) == SQLITE_HEADER
    except OSError:
        return False


def _same_file(a: Path, b: Path) -> bool:
    if a.resolve() == b.resolve():
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def check_output(path: str | Path, db: str | Path | None = None) -> Path:
    """An output file of a command must not be the results database ``db`` or one of its
    -wal/-shm/-journal files, by any name (relative, symlinked, hard-linked), nor any other SQLite
    database or its sidecar: writing there would destroy stored results, or another application's
    data. Raises :class:`UsageError`; returns the path."""
    out = Path(path)
    if db is not None:
        for base in {Path(db), Path(db).resolve()}:
            for suffix in ("", *SIDECARS):
                if _same_file(out, base.with_name(base.name + suffix)):
                    what = "the results database" if not suffix else f"the {suffix[1:]} file of the results database"
                    raise UsageError(f"{path} is {what} {db}; refusing to overwrite it")
    if is_sqlite(out):
        raise UsageError(f"{path} is an SQLite database; refusing to overwrite it")
    real = out.resolve()
    for suffix in SIDECARS:
        if real.name.endswith(suffix) and is_sqlite(real.with_name(real.name[: -len(suffix)])):
            raise UsageError(f"{path} is the {suffix[1:]} file of an SQLite database; refusing to overwrite it")
    return out


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror}") from None


class OutputDir:
    """A folder the user named (``root``, followed with everything above it) and the files a command
    writes in it, named relative to it (``"runs/abc.html"``).

    ``own``: the folder is dlbench's own (the site's, proven by its marker), so a symbolic link found
    where a file or subfolder goes is removed and replaced rather than refused. ``create``: make
    ``root`` (and its missing parents) when it is not there; a single output file's folder is not made.
    ``db``: the results database the command read, never to be written over."""

    def __init__(self, root: str | Path, *, db: str | Path | None = None, own: bool = False,
                 create: bool = True) -> None:
        self.root = Path(root)
        self.db = db
        self.own = own
        self.create = create

    def _parts(self, rel: str) -> tuple[str, ...]:
        parts = PurePosixPath(rel).parts
        if not parts or PurePosixPath(rel).is_absolute() or any(p in (".", "..") for p in parts):
            raise ValueError(f"an output's name must stay inside its folder: {rel!r}")  # a caller's bug
        return parts

    def check(self, rels: Iterable[str]) -> list[Path]:
        """Refuse (:class:`UsageError`) before anything is written: ``root`` not a directory (or missing
        where it is not to be made), a file to write that is the database or an SQLite file, a
        directory, or a symbolic link (unless the folder is ours), a folder on the way that is a
        file or a symbolic link (idem). Returns the paths."""
        try:
            st: os.stat_result | None = os.stat(self.root)  # the named folder: followed
        except (FileNotFoundError, NotADirectoryError):
            st = None
        except OSError as exc:
            raise UsageError(f"cannot write in {self.root}: {exc.strerror}") from None
        if st is not None and not stat.S_ISDIR(st.st_mode):
            raise UsageError(f"{self.root} is a file, not a directory")
        if st is None and not self.create:
            raise UsageError(f"cannot write in {self.root}: {os.strerror(errno.ENOENT)}")
        if st is not None and not os.access(self.root, os.W_OK | os.X_OK):
            raise UsageError(f"cannot write in {self.root}: permission denied")
        return [self._check_one(rel) for rel in rels]

    def _check_one(self, rel: str, folder: bool = False) -> Path:
        """One file (or with ``folder``, one folder) to be written at ``rel``."""
        parts = self._parts(rel)
        path = self.root.joinpath(*parts)
        if not folder:
            check_output(path, self.db)  # a link to the database is named as such
        here = self.root
        for k, part in enumerate(parts):
            here = here / part
            st = _lstat(here)
            if st is None:
                break  # made by the write, with everything below it
            last = k == len(parts) - 1
            if stat.S_ISLNK(st.st_mode):
                if not self.own:
                    raise UsageError(f"{here} is a symbolic link; refusing to write through it (remove it, "
                                     "or name another path)")
                break  # replaced by a real file or folder
            if last and not folder and stat.S_ISDIR(st.st_mode):
                raise UsageError(f"cannot write {path}: {os.strerror(errno.EISDIR)}")
            if (not last or folder) and not stat.S_ISDIR(st.st_mode):
                raise UsageError(f"{here} is not a directory; cannot write {path}")
            if (not last or folder) and not os.access(here, os.W_OK | os.X_OK):
                raise UsageError(f"cannot write in {here}: permission denied")
        return path

    def write(self, files: Mapping[str, str | bytes]) -> list[Path]:
        """Check every file (:meth:`check`), then write each (text as UTF-8) under a temporary name
        in its folder and rename it into place. Returns the paths, in the order given."""
        paths = self.check(files)
        with self._descriptors() as fds:
            for (rel, data), path in zip(files.items(), paths, strict=True):
                parts = self._parts(rel)
                _replace(self._folder(parts[:-1], fds), parts[-1],
                         data.encode("utf-8") if isinstance(data, str) else data, path, self.own)
        return paths

    def copy_from(self, src: Path, under: str) -> list[Path]:
        """Every regular file below ``src`` (a temporary folder of our own that another program wrote:
        a profiler, LoadGen, which follow any link they meet) written at the same relative path below
        ``under`` (:meth:`write`); links in ``src`` are not followed. Returns the paths written."""
        files: dict[str, bytes] = {}
        for folder, _, names in os.walk(src):
            for name in names:
                path = Path(folder) / name
                if path.is_file() and not path.is_symlink():
                    try:
                        files[(Path(under) / path.relative_to(src)).as_posix()] = path.read_bytes()
                    except OSError as exc:
                        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
        return self.write(files)

    def make_dir(self, rel: str) -> Path:
        """The folder ``rel`` inside ``root``, made where missing, none of it a symbolic link (for the
        files another program writes there: a profiler's trace, LoadGen's logs)."""
        parts = self._parts(rel)
        self.check([])
        self._check_one(rel, folder=True)
        with self._descriptors() as fds:
            self._folder(parts, fds)
        return self.root.joinpath(*parts)

    @contextmanager
    def _descriptors(self) -> Iterator[dict[tuple[str, ...], int]]:
        """``root`` made (where it is to be), and the folder descriptors :meth:`_folder` opens, closed after."""
        if self.create:
            try:
                self.root.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise UsageError(f"cannot create {self.root}: {exc.strerror}") from None
        fds: dict[tuple[str, ...], int] = {}
        try:
            yield fds
        finally:
            for fd in fds.values():
                os.close(fd)

    def _folder(self, parts: tuple[str, ...], fds: dict[tuple[str, ...], int]) -> int:
        """A descriptor of the folder ``parts`` below ``root``, each step opened with ``O_NOFOLLOW``
        (made when missing; a link in its place removed where the folder is ours, else refused)."""
        if parts in fds:
            return fds[parts]
        if not parts:
            try:
                fds[parts] = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError as exc:
                raise UsageError(f"cannot write in {self.root}: {exc.strerror}") from None
            return fds[parts]
        parent = self._folder(parts[:-1], fds)
        name, where = parts[-1], self.root.joinpath(*parts)
        flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            st = _lstat_at(name, parent)
            if st is not None and stat.S_ISLNK(st.st_mode):
                if not self.own:
                    raise UsageError(f"{where} is a symbolic link; refusing to write through it (remove it, or name "
                                     "another path)")
                os.unlink(name, dir_fd=parent)  # the link, never its target
                st = None
            if st is None:
                os.mkdir(name, dir_fd=parent)
            fds[parts] = os.open(name, flags, dir_fd=parent)
        except OSError as exc:
            raise UsageError(f"cannot create {where}: {exc.strerror}") from None
        return fds[parts]


def _lstat_at(name: str, folder: int) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _replace(folder: int, name: str, data: bytes, path: Path, own: bool) -> None:
    """Write ``data`` as ``name`` in the open ``folder``: a temporary file (never through a link:
    ``O_EXCL | O_NOFOLLOW``), flushed to disk, then renamed over ``name``. An existing file's
    permissions are kept (an export made private stays private)."""
    st = _lstat_at(name, folder)
    if st is not None and stat.S_ISLNK(st.st_mode) and not own:  # planted since the check
        raise UsageError(f"{path} is a symbolic link; refusing to write through it (remove it, or name another path)")
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise UsageError(f"cannot write {path}: {os.strerror(errno.EISDIR)}")
    tmp = f".dlbench-{secrets.token_hex(8)}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666, dir_fd=folder)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror}") from None
    try:
        try:
            if st is not None and stat.S_ISREG(st.st_mode):
                os.fchmod(fd, stat.S_IMODE(st.st_mode))
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=folder, dst_dir_fd=folder)
    except OSError as exc:
        try:
            os.unlink(tmp, dir_fd=folder)
        except OSError:
            pass
        raise UsageError(f"cannot write {path}: {exc.strerror}") from None


def replace_file(path: Path, text: str) -> None:
    """Write one of dlbench's own files (a kept cache, an environment's record, a lock, a cluster's state, a
    rank's result) whole or not at all: a temporary file of a random name beside it, created exclusively
    (``mkstemp``: ``O_EXCL``, and ``O_NOFOLLOW`` where the system has it, so never through a link planted
    at a name dlbench would use), then renamed over ``path`` (a link at ``path`` itself is replaced, its
    target untouched). An existing file's permissions are kept; a new one's are 0644. Raises OSError."""
    try:
        st = os.lstat(path)
        mode = stat.S_IMODE(st.st_mode) if stat.S_ISREG(st.st_mode) else 0o644
    except FileNotFoundError:
        mode = 0o644
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            os.fchmod(f.fileno(), mode)
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp)
        raise


def write_file(path: str | Path, data: str | bytes, db: str | Path | None = None) -> Path:
    """One output file the user named (``export --out``, ``compare --html``): its folder must exist;
    the file itself may not be a symbolic link, the database or an SQLite file (:class:`OutputDir`)."""
    p = Path(path)
    if p.name in ("", ".", ".."):
        raise UsageError(f"cannot write {path}: {os.strerror(errno.EISDIR)}")
    return OutputDir(p.parent, db=db, create=False).write({p.name: data})[0]


def check_file(path: str | Path, db: str | Path | None = None) -> Path:
    """:func:`write_file`'s checks alone, before a command reads what it will write."""
    p = Path(path)
    if p.name in ("", ".", ".."):
        raise UsageError(f"cannot write {path}: {os.strerror(errno.EISDIR)}")
    return OutputDir(p.parent, db=db, create=False).check([p.name])[0]
