#!/usr/bin/env bash
# Install lm-eval 0.4.13 (what repro.eval needs) on a machine with or without a package registry.
#
# With a wheel folder (default: the first of $LM_EVAL_WHEELS, shared/wheels/lm-eval-py312,
# ../shared/wheels/lm-eval-py312, /work/shared/wheels/lm-eval-py312 that holds lm_eval-0.4.13-*.whl):
# install those wheels only, with --no-index --no-deps, into a separate folder ($EVAL_SITE, default
# /tmp/site) so the machine's own torch/pyarrow/... stay as they are; then
#     export PYTHONPATH=$EVAL_SITE:$PYTHONPATH
# (the script prints this line). The folder's wheels were built for CPython 3.12 on x86-64 Linux.
# Without one: pip install "lm-eval==0.4.13" from the registry, into the environment.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
SITE=${EVAL_SITE:-/tmp/site}
WHEELS=""
for d in "${LM_EVAL_WHEELS:-}" shared/wheels/lm-eval-py312 ../shared/wheels/lm-eval-py312 /work/shared/wheels/lm-eval-py312; do
    if [ -n "$d" ] && compgen -G "$d/lm_eval-0.4.13-*.whl" >/dev/null; then
        WHEELS=$d
        break
    fi
done
if [ -n "$WHEELS" ]; then
    echo "install_eval: lm-eval from the wheels in $WHEELS -> $SITE" >&2
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$WHEELS"/*.whl
    PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}" "$PY" -c \
        "import lm_eval, lm_eval.api.model, lm_eval.tasks; print('install_eval: lm_eval', lm_eval.__version__ if hasattr(lm_eval, '__version__') else '0.4.13', 'imports')"
    echo "export PYTHONPATH=$SITE\${PYTHONPATH:+:\$PYTHONPATH}"
else
    echo "install_eval: no lm-eval wheel folder found; pip install lm-eval==0.4.13 from the registry" >&2
    "$PY" -m pip install -q "lm-eval==0.4.13"
fi
