"""Shared definitions of the workflow: suites, the device folder, the profile, stamp files.

Results live in results/<device>/<suite>.csv, which are committed and merged per profile by the
CLI; Snakemake tracks a run through a stamp file in .snakemake-runs/ (git-ignored) instead, so it
never deletes a results file before a job and a fresh clone always rebuilds.
"""

sys.path.insert(0, str(Path(workflow.basedir)))

from repro.provenance import device_slug  # noqa: E402
from suites import SUITES  # noqa: E402


def _device():
    import torch

    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


DEVICE = _device()
SLUG = device_slug(DEVICE)
PROFILE = config.get("profile", "auto")
if PROFILE == "auto":
    PROFILE = "full" if DEVICE.type == "cuda" else "smoke"
if PROFILE not in ("smoke", "full", "paper"):
    raise ValueError(f"config profile must be auto, smoke, full or paper, got {PROFILE!r}")


def _python():
    """The interpreter of the jobs: ``--config python=...`` if given; under ``--use-conda`` (``--sdm
    conda``) the rule's environment's own ``python`` (the host's would silently bypass it); else
    the interpreter running Snakemake, into which scripts/bootstrap.sh installed the packages."""
    if config.get("python"):
        return config["python"]
    try:
        from snakemake.settings.types import DeploymentMethod

        if DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method:
            return "python"
    except (ImportError, AttributeError):  # another Snakemake API: the host interpreter
        pass
    return sys.executable


PYTHON = shlex.quote(_python())
# Processes (one GPU each) for the suites that run under torchrun (``DISTRIBUTED = True`` in the
# suite module, e.g. fast_figure3_e2e): snakemake --config world=4. The other suites run one process.
try:
    WORLD = int(config.get("world", 1))
except (TypeError, ValueError):
    WORLD = 0
if WORLD < 1:
    raise ValueError(f"config world must be an integer >= 1, got {config.get('world')!r}")
STAMPS = Path(".snakemake-runs") / SLUG / PROFILE
LOGS = Path("logs") / SLUG / PROFILE


def suite_code(wildcards):
    """Every source file behind the suite's numbers: its module and what it imports from this
    repository, transitively, private modules included (``repro.deps.suite_sources``)."""
    from repro.deps import suite_sources

    return list(suite_sources(wildcards.suite))


def suite_data(wildcards):
    """The token corpus a training suite reads at this profile (``DATA`` of the suite module: the
    corpus folder per profile), as the manifest the ``corpus`` rule builds; nothing for the others."""
    from suites import get_suite

    folder = getattr(get_suite(wildcards.suite), "DATA", {}).get(PROFILE)
    return [f"{folder}/manifest.json"] if folder else []


def _distributed(suite):
    from suites import get_suite

    return bool(getattr(get_suite(suite), "DISTRIBUTED", False))


def suite_world(wildcards):
    """Processes (GPUs) of the suite's job: WORLD for a distributed suite, else 1."""
    return WORLD if _distributed(wildcards.suite) else 1


def suite_launcher(wildcards):
    """The interpreter command of the suite's job: ``torchrun --standalone`` with WORLD processes
    on this node for a distributed suite at WORLD > 1 (rank 0 writes the results; a failed or hung
    rank fails the job within REPRO_DIST_TIMEOUT_S and writes nothing), else plain python."""
    world = suite_world(wildcards)
    if world == 1:
        return PYTHON
    return f"{PYTHON} -m torch.distributed.run --standalone --nproc-per-node {world}"


def dashboard_inputs(wildcards):
    """What the site is built from: every results file and figure, the reviews, the paper data and
    the site's code (with no inputs the rule never rebuilt after its first run)."""
    files = [*Path("results").glob("*/*.csv"), *Path("figures").glob("*/*.*"), *Path("repro/paper_data").glob("*.csv")]
    files += [Path("results/reviews.csv"), Path("repro/dashboard.py"), Path("repro/dashboard_claims.py")]
    files += [Path("repro/staleness.py")]
    return sorted(str(f) for f in files if f.is_file())


def unknown_target(wildcards):
    """Fail while Snakemake plans, for a target that is neither a rule nor a path a rule makes
    (``snakemake figur3``): name the close ones and every target (Snakemake's own "No rule to
    produce figur3" lists none)."""
    import difflib

    from snakemake.exceptions import WorkflowError

    targets = sorted(r.name for r in workflow.rules if not r.has_wildcards())
    close = difflib.get_close_matches(wildcards.target, targets, n=3)
    hint = f" Did you mean {' or '.join(close)}?" if close else ""
    raise WorkflowError(
        f"unknown target {wildcards.target!r}.{hint} Targets: {', '.join(targets)} "
        "(snakemake --list-target-rules lists them; python -m repro list says what each suite rebuilds)."
    )
