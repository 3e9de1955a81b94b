"""One long-format results schema for every suite, with provenance on every row.

A suite's run becomes rows (suite, artifact, method, variant, shape, dtype, metric, value, unit,
...), where ``variant`` is the suite's extra axis (a sparsity pattern, a world size, a mode),
written atomically to ``results/<device-slug>/<suite>.csv``. A run replaces only the rows of its
own profile on its own device: another GPU's folder is never touched, and a smoke run on a GPU
machine does not erase that GPU's full-profile rows.
"""

from __future__ import annotations

import math
import os
import tempfile
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
PROFILES = ("smoke", "full")


def results_root() -> Path:
    return Path(os.environ.get("REPRO_RESULTS_DIR", REPO / "results"))


def shape_str(shape: tuple[int, ...] | list[int]) -> str:
    return "x".join(str(int(s)) for s in shape)


class ResultSet:
    """Rows of one suite run on one device and profile."""

    def __init__(self, suite: str, artifact: str, profile: str, device: torch.device, command: str | None = None):
        if profile not in PROFILES:
            raise ValueError(f"profile must be one of {PROFILES}, got {profile!r}")
        self.suite = suite
        self.artifact = artifact
        self.profile = profile
        self.device = device
        self.prov = provenance(device, command)
        self.rows: list[dict] = []

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
        if not isinstance(value, (int, float)) or math.isnan(float(value)):
            raise ValueError(f"refusing to record a non-numeric or NaN value for {method}/{shape}/{metric}")
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

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.rows, columns=list(RESULT_COLUMNS))

    def path(self, root: Path | None = None) -> Path:
        return (root or results_root()) / self.prov["device"] / f"{self.suite}.csv"

    def write(self, root: Path | None = None) -> Path:
        """Merge into the suite's file (replacing this profile's rows) and write it atomically."""
        if not self.rows:
            raise ValueError(f"suite {self.suite} produced no rows; nothing written")
        path = self.path(root)
        new = self.frame()
        if path.exists():
            old = read_results(path)
            new = pd.concat([old[old["profile"] != self.profile], new], ignore_index=True)
        write_atomic(new, path)
        return path


def write_atomic(df: pd.DataFrame, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", newline="") as fh:
            df.to_csv(fh, index=False)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_results(path: Path) -> pd.DataFrame:
    df = pd.read_csv(path, dtype={"shape": str, "dtype": str, "git_commit": str, "variant": str}, keep_default_na=False)
    if "variant" not in df.columns and "method" in df.columns:  # files written before the column existed
        df.insert(df.columns.get_loc("method") + 1, "variant", "")
    missing = set(RESULT_COLUMNS) - set(df.columns)
    if missing:
        raise ValueError(f"{path} is not a results file: missing columns {sorted(missing)}")
    df["value"] = df["value"].astype(float)
    df["verified"] = df["verified"].astype(str).str.lower().isin(["true", "1"])
    return df


def load_suite_results(suite: str, root: Path | None = None) -> pd.DataFrame:
    """All rows of a suite over every device folder under ``results/``."""
    root = root or results_root()
    frames = [read_results(p) for p in sorted(root.glob(f"*/{suite}.csv"))]
    if not frames:
        return pd.DataFrame(columns=list(RESULT_COLUMNS))
    return pd.concat(frames, ignore_index=True)
