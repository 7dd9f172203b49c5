#!/usr/bin/env bash
# Prepare a lent GPU machine (no network) for perfguard: install the carried wheels (asv, SQLAlchemy,
# Alembic, ... that the image lacks) into /tmp/site, make the checkout importable, and give it a git
# history when the copy arrived without one.  Source it:  source docs/perf/device_setup.sh
# Fill .whl/ (ignored; carry it) on a machine with PyPI, for the device's Python 3.12:
#   pip download -d .whl --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
#     asv==0.6.6 asv-runner==0.3.2 sqlalchemy alembic click rich jinja2 json5 nvidia-ml-py markupsafe mako \
#     greenlet typing_extensions markdown-it-py mdurl pygments tabulate pympler packaging pyyaml tomli \
#     virtualenv importlib-metadata py-spy
# (py-spy: native stacks of a worker that stops making progress, docs/perf/hang_stack_gpu.sh)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || return 1 2>/dev/null || exit 1
export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
# The copy is measured as a commit: give it a history, and commit what differs from the copied one
# (perfguard calibrate refuses a dirty tree; check and run would measure it as "HEAD + changes").
git rev-parse --git-dir >/dev/null 2>&1 || git init -q -b main .
if [ -n "$(git status --porcelain)" ]; then
  git add -A >/dev/null 2>&1 && \
    git -c user.name=perfguard -c user.email=perfguard@localhost commit -qm "device copy" >/dev/null
fi
perfguard() { python3 -m perfguard "$@"; }
