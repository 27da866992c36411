# Sourced by the other scripts: make sure .venv exists and holds this project's dependencies.
# Re-installs only when pyproject.toml changed since the last install (a stamp file says).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${ICEFLOE_PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
stamp=".venv/.icefloe-installed"
want="$(sha256sum pyproject.toml | cut -d' ' -f1)-${ICEFLOE_EXTRAS:-dev}"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    .venv/bin/python -m pip install -q --upgrade pip >&2
    .venv/bin/python -m pip install -q -e ".[${ICEFLOE_EXTRAS:-dev}]" >&2
    echo "$want" > "$stamp"
fi
export PATH="$ROOT/.venv/bin:$PATH"
