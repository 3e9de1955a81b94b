"""One long-format results schema for every suite, with provenance on every row.

A suite's run becomes rows (suite, artifact, method, variant, shape, dtype, metric, value, unit,
...), where ``variant`` is the suite's extra axis (a sparsity pattern, a world size, a mode),
written atomically to ``results/<device-slug>/<suite>.csv``. A run replaces only the rows of its
own profile on its own device: another GPU's folder is never touched, and a smoke run on a GPU
machine does not erase that GPU's full-profile rows.
"""

from __future__ import annotations

import contextlib
import csv
import io
import math
import os
import re
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import torch

from repro.provenance import REPO, provenance

PROVENANCE_COLUMNS = (
    "git_commit",
    "device",
    "gpu_name",
    "torch_version",
    "triton_version",
    "cuda_version",
    "cusparselt_version",
    "command",
    "timestamp",
)
RESULT_COLUMNS = (
    "suite",
    "artifact",
    "method",
    "variant",
    "shape",
    "dtype",
    "metric",
    "value",
    "unit",
    "profile",
    "timer",
    "verified",
    *PROVENANCE_COLUMNS,
)
PROFILES = ("smoke", "full", "paper")  # paper: the paper's own configuration (training suites)
# Columns a row may leave empty: no extra axis, a host-side quantity without a timer, a ratio
# without a unit (rel_err_vs_fp64). Every other column is required on every row.
OPTIONAL_COLUMNS = frozenset({"variant", "timer", "unit"})
# What ``repro.provenance.device_slug`` makes of a device: ``cpu`` or a GPU name such as
# ``nvidia-h100-80gb-hbm3``. Device names become folder names, so nothing else is accepted.
DEVICE_SLUG_RE = re.compile(r"[a-z0-9][a-z0-9-]*")
_TRUE, _FALSE = frozenset({"true", "1"}), frozenset({"false", "0"})


class InputError(ValueError):
    """A results file, a device name or a command-line input that cannot be used as is: the CLI
    prints the message on one line and exits with status 2."""


def check_device_slug(device: object, where: str = "") -> str:
    """``device`` if it is a device slug (a safe single folder name), else an InputError naming it."""
    if not isinstance(device, str) or not DEVICE_SLUG_RE.fullmatch(device):
        at = f"{where}: " if where else ""
        raise InputError(
            f"{at}device {device!r} is not a device name (lower-case letters, digits and '-', "
            "as repro.provenance.device_slug makes them, e.g. cpu or nvidia-h100-80gb-hbm3)"
        )
    return device


def contained_path(base: Path, *parts: str, what: str = "path") -> Path:
    """``base / parts``, refused (InputError) unless it resolves inside ``base``."""
    target = base.joinpath(*parts)
    root = base.resolve()
    resolved = target.resolve()
    if resolved != root and root not in resolved.parents:
        raise InputError(f"{what} {target} resolves to {resolved}, outside {root}; refusing to use it")
    return target


def results_root() -> Path:
    return Path(os.environ.get("REPRO_RESULTS_DIR", REPO / "results"))


def shape_str(shape: tuple[int, ...] | list[int]) -> str:
    return "x".join(str(int(s)) for s in shape)


class ResultSet:
    """Rows of one suite run on one device and profile."""

    def __init__(self, suite: str, artifact: str, profile: str, device: torch.device, command: str | None = None):
        if profile not in PROFILES:
            raise ValueError(f"profile must be one of {PROFILES}, got {profile!r}")
        if os.environ.get("REPRO_PLANT_SLOWDOWN"):  # the benchmark gate's A/B check, never a result
            raise InputError("REPRO_PLANT_SLOWDOWN is set (a planted slowdown for the gate's A/B check): unset it")
        self.suite = suite
        self.artifact = artifact
        self.profile = profile
        self.device = device
        self.prov = provenance(device, command)
        self.rows: list[dict] = []
        self._keys: set[tuple[str, ...]] = set()
        self.journal: Path | None = None

    def add(
        self,
        method: str,
        shape: str,
        dtype: str,
        metric: str,
        value: float,
        unit: str,
        *,
        verified: bool,
        timer: str = "",
        variant: str = "",
    ) -> None:
        if not isinstance(value, (int, float)) or not math.isfinite(float(value)):
            raise ValueError(
                f"refusing to record a non-numeric or non-finite (NaN, inf) value {value!r} "
                f"for {method}/{shape}/{metric}"
            )
        key = (method, variant, shape, dtype, metric)
        if key in self._keys:  # readers take one row a key: a second would hide one of the two values
            raise ValueError(f"{self.suite}: a row for {'/'.join(key)} is already recorded in this run")
        self._keys.add(key)
        self.rows.append(
            {
                "suite": self.suite,
                "artifact": self.artifact,
                "method": method,
                "variant": variant,
                "shape": shape,
                "dtype": dtype,
                "metric": metric,
                "value": float(value),
                "unit": unit,
                "profile": self.profile,
                "timer": timer,
                "verified": bool(verified),
                **self.prov,
            }
        )
        if self.journal is not None:
            self._journal_append(self.rows[-1])

    def journal_path(self, root: Path | None = None) -> Path:
        """``<root>/<device-slug>/<suite>.<profile>.partial``: the rows of a run in progress (not
        ``*.csv``, so that no reader of finished results takes it for one)."""
        final = self.path(root)
        return final.with_name(f"{self.suite}.{self.profile}{JOURNAL_SUFFIX}")

    def start_journal(self, root: Path | None = None) -> Path:
        """Keep every row on disk as it is added, so that a run stopped before its end (the end
        of a lease, a later part out of memory, a lost rank) keeps the rows it finished: a
        device call's job at the end of its lease lost 11 minutes of table8 rows, and a world-4
        run its 460M rows when its 7B part failed (campaign 85d52d1). ``write`` removes the
        journal; ``scripts/merge_results.py --partial`` merges a left-over one, marked."""
        path = self.journal_path(root)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.set_aside = _set_aside(path, self.suite)
        with open(path, "w", encoding="utf-8", newline="") as fh:
            csv.writer(fh, lineterminator="\n").writerow(RESULT_COLUMNS)
            for row in self.rows:
                fh.write(_csv_line(row))
        self.journal = path
        return path

    set_aside: Path | None = None
    """Where ``start_journal`` moved an earlier run's unmerged journal (None: there was none)."""

    def _journal_append(self, row: dict) -> None:
        assert self.journal is not None
        with open(self.journal, "a", encoding="utf-8", newline="") as fh:
            fh.write(_csv_line(row))  # one write of a whole line: a kill leaves whole lines

    def drop_journal(self) -> None:
        """Remove the journal (the run wrote its results, or failed a correctness check: then
        none of its rows are kept)."""
        if self.journal is not None:
            self.journal.unlink(missing_ok=True)
            self.journal = None

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.rows, columns=list(RESULT_COLUMNS))

    def path(self, root: Path | None = None) -> Path:
        """``<root>/<device-slug>/<suite>.csv``; a device or suite name that is not a plain folder
        or file name (``..``, ``/abs``) is refused."""
        root = root or results_root()
        device = check_device_slug(self.prov["device"], "results folder")
        if not DEVICE_SLUG_RE.fullmatch(self.suite.replace("_", "-")):
            raise InputError(f"suite {self.suite!r} is not a suite name; refusing to use it as a file name")
        return contained_path(root, device, f"{self.suite}.csv", what="results file")

    def write(self, root: Path | None = None) -> Path:
        """Merge into the suite's file (replacing this profile's rows) and write it atomically.

        Read, merge and write happen under an exclusive lock of the file (see ``locked``), so two
        runs of the same suite on the same device (say a smoke and a full run) writing at once keep
        both sides' rows."""
        if not self.rows:
            raise ValueError(f"suite {self.suite} produced no rows; nothing written")
        path = self.path(root)
        new = self.frame()
        path.parent.mkdir(parents=True, exist_ok=True)
        with locked(path):
            if path.exists():
                old = read_results(path)
                new = pd.concat([old[old["profile"] != self.profile], new], ignore_index=True)
            write_atomic(new, path)
        self.drop_journal()
        return path


JOURNAL_SUFFIX = ".partial"
PARTIAL_MARK = " [partial run: stopped before its end; rows as each part finished]"
"""Appended to the ``command`` of rows merged from a journal (``read_journal``)."""


def _csv_line(row: dict) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow([row[c] for c in RESULT_COLUMNS])
    return buf.getvalue()


def _set_aside(journal: Path, suite: str) -> Path | None:
    """Move an earlier run's journal that holds rows (a run stopped early, not merged yet) to
    ``<suite>.<profile>.<UTC time>.partial`` beside it, so a new run of the same suite and profile
    does not overwrite it (it once did: the earlier run's rows were lost); says so on stderr.
    Returns the new path (None when there was nothing to keep)."""
    import sys
    import time

    if not journal.is_file():
        return None
    with open(journal, encoding="utf-8") as fh:
        if len(fh.readlines(2 * len(",".join(RESULT_COLUMNS)))) < 2:  # the header alone: nothing to keep
            return None
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    base = journal.name.removesuffix(JOURNAL_SUFFIX)
    dest = journal.with_name(f"{base}.{stamp}{JOURNAL_SUFFIX}")
    n = 1
    while dest.exists():
        n += 1
        dest = journal.with_name(f"{base}.{stamp}-{n}{JOURNAL_SUFFIX}")
    journal.rename(dest)
    print(
        f"   an earlier run's unmerged rows were in {journal.name}: kept as {dest} "
        f"(merge: python scripts/merge_results.py {suite} {dest} --partial --into {journal.parent.parent})",
        file=sys.stderr,
        flush=True,
    )
    return dest


def read_journal(path: Path) -> pd.DataFrame:
    """The rows of a run's journal (``ResultSet.start_journal``), checked as a results file, a last
    line cut mid-write dropped, each row's ``command`` marked with ``PARTIAL_MARK``."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    if text and not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]  # the line being written when the run was killed
    df = _parse_results(path, text)
    df["command"] = df["command"].astype(str) + PARTIAL_MARK
    return df


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``.<name>.lock`` beside ``path`` while the block runs.

    Writers of ``path`` that take it run one at a time; readers need none (files are replaced
    atomically). The lock file is removed on release (no stray files in results/): a waiter that
    got the lock of a file already removed or replaced tries again, so at most one holds the lock
    of the file at the path. A file rather than the folder is locked because NFS emulates flock
    with write locks, which a read-only folder descriptor cannot take. Without ``fcntl`` (not
    POSIX) nothing is locked."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    lock = path.with_name(f".{path.name}.lock")
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            held = os.fstat(fd)
            try:
                now = os.stat(lock)
            except FileNotFoundError:
                now = None
        except BaseException:
            os.close(fd)
            raise
        if now is not None and (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino):
            break
        os.close(fd)  # removed or replaced while we waited: lock the file at the path now
    try:
        yield
    finally:
        try:
            lock.unlink(missing_ok=True)  # before the release, so no waiter takes a removed file for the lock
        finally:
            os.close(fd)


def _umask() -> int:
    try:  # Linux >= 4.7: read it without changing it (os.umask() sets it, racing other threads)
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_atomic(df: pd.DataFrame, path: Path) -> None:
    """Write ``df`` to ``path`` through a temporary file and an atomic rename. An existing file
    keeps its mode; a new one gets 0644 less the umask (not the temporary file's 0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        mode = 0o644 & ~_umask()
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", newline="") as fh:
            df.to_csv(fh, index=False)
            os.fchmod(fh.fileno(), mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _check_rows(path: Path, text: str) -> None:
    """Every record has all columns of the header, the required ones non-empty, a finite value, a
    known profile, a device slug and a true/false ``verified``; else an InputError naming the file
    and the line."""
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    try:
        header = next(reader, None)
        while header == []:  # blank lines before the header
            header = next(reader, None)
        if header is None:
            raise InputError(f"{path} is empty: not a results file")
        missing = set(RESULT_COLUMNS) - set(header) - ({"variant"} if "method" in header else set())
        if missing:
            raise InputError(f"{path} is not a results file: missing columns {sorted(missing)}")
        col = {name: i for i, name in enumerate(header)}
        required = [c for c in RESULT_COLUMNS if c not in OPTIONAL_COLUMNS and c in col]
        start = reader.line_num + 1
        for cells in reader:
            line, start = start, reader.line_num + 1
            if not cells:  # a blank line (pandas skips it too)
                continue
            where = f"{path}, line {line}"
            if len(cells) != len(header):
                raise InputError(
                    f"{where}: {len(cells)} fields, the header has {len(header)} (a truncated or garbled row)"
                )
            empty = [c for c in required if not cells[col[c]].strip()]
            if empty:
                raise InputError(f"{where}: empty required field(s) {', '.join(empty)} (a truncated or corrupt row)")
            raw = cells[col["value"]]
            try:
                value = float(raw) if "_" not in raw else None  # float() takes 1_000; pandas does not
            except ValueError:
                value = None
            if value is None:
                raise InputError(f"{where}: value {raw!r} is not a number")
            if not math.isfinite(value):
                raise InputError(f"{where}: value {raw!r} is not finite")
            if cells[col["profile"]] not in PROFILES:
                raise InputError(f"{where}: profile {cells[col['profile']]!r} is not one of {PROFILES}")
            check_device_slug(cells[col["device"]], where)
            if cells[col["verified"]].strip().lower() not in _TRUE | _FALSE:
                raise InputError(f"{where}: verified {cells[col['verified']]!r} is not True or False")
    except csv.Error as exc:
        raise InputError(f"{path}, line {reader.line_num}: not a valid CSV file ({exc})") from None


def read_results(path: Path) -> pd.DataFrame:
    """One results file, every row checked (see ``_check_rows``); an InputError (a ValueError)
    naming the file and the line for a file that is not a complete, finite results table."""
    path = Path(path)
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            text = fh.read()
    except UnicodeDecodeError as exc:
        raise InputError(f"{path} is not a results file: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    return _parse_results(path, text)


def _parse_results(path: Path, text: str) -> pd.DataFrame:
    """``read_results`` of ``text`` read from ``path`` (named in errors)."""
    _check_rows(path, text)
    try:
        df = pd.read_csv(
            io.StringIO(text),  # the text just checked
            dtype={"shape": str, "dtype": str, "git_commit": str, "variant": str},
            keep_default_na=False,
        )
    except (pd.errors.ParserError, pd.errors.EmptyDataError, ValueError) as exc:
        raise InputError(f"{path} is not a readable results file: {exc}") from None
    if "variant" not in df.columns and "method" in df.columns:  # files written before the column existed
        df.insert(df.columns.get_loc("method") + 1, "variant", "")
    df["value"] = df["value"].astype(float)
    df["verified"] = df["verified"].astype(str).str.strip().str.lower().isin(_TRUE)
    return df


def load_suite_results(suite: str, root: Path | None = None) -> pd.DataFrame:
    """All rows of a suite over every device folder under ``results/``."""
    root = root or results_root()
    frames = [read_results(p) for p in sorted(root.glob(f"*/{suite}.csv"))]
    if not frames:
        return pd.DataFrame(columns=list(RESULT_COLUMNS))
    return pd.concat(frames, ignore_index=True)
