#!/bin/sh
# Install the crawler package from a source tree into a fresh virtualenv.
#
#   deploy/install.sh VENV_DIR [SOURCE_DIR]
#
# The Dockerfile's builder stage runs exactly this script, and the deploy tests run it
# in CI against the same build context, so the image's install steps cannot drift from
# what is tested. Environment: PYTHON (default python3); pip honours its own PIP_*
# variables (the Dockerfile sets PIP_NO_CACHE_DIR=1).
set -eu

venv=${1:?usage: deploy/install.sh VENV_DIR [SOURCE_DIR]}
src=${2:-.}
python=${PYTHON:-python3}

"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --disable-pip-version-check --quiet "$src"

# The console script the image's CMD runs must exist and start.
"$venv/bin/crawler" --help >/dev/null
echo "installed $("$venv/bin/python" -c 'import importlib.metadata as m; print("crawler", m.version("crawler"))') into $venv"
