#!/usr/bin/env bash
# Prepare a lent GPU machine (no network) for perfguard: install the carried wheels (asv, SQLAlchemy,
# Alembic, ... that the image lacks) into /tmp/site, make the checkout importable, and give it a git
# history when the copy arrived without one.  Source it:  source docs/perf/device_setup.sh
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
