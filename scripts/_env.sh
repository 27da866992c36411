# Sourced by the other scripts: make sure .venv exists and holds this project's dependencies.
# ICEFLOE_EXTRAS names the extras to install: unset means "dev" (tests, linters, docs: what
# scripts/test and scripts/check need); empty means the runtime dependencies only (what
# scripts/serve sets: serving needs no pyspark, selenium or mypy).
# Re-installs only when pyproject.toml changed since the last install, or when more extras are
# wanted than were installed (a stamp file says which); a venv with the dev extra serves too.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${ICEFLOE_PYTHON:-python3}"
extras="${ICEFLOE_EXTRAS-dev}"
say() { echo "icefloe: $*" >&2; }
if [ ! -x .venv/bin/python ]; then
    say "creating the virtual environment .venv (first run only)"
    "$PY" -m venv .venv
fi
stamp=".venv/.icefloe-installed"
hash="$(sha256sum pyproject.toml | cut -d' ' -f1)"
installed=""
[ -f "$stamp" ] && installed="$(cat "$stamp")"
needed=1
if [ "$installed" = "$hash-$extras" ]; then
    needed=0
elif [ -z "$extras" ] && [ "${installed%%-*}" = "$hash" ]; then
    needed=0  # runtime only: any install of this pyproject.toml holds it
fi
if [ "$needed" = "1" ]; then
    what="icefloe${extras:+[$extras]}"
    say "installing $what and its dependencies into .venv (first run, or pyproject.toml changed; 1-3 minutes)"
    log=".venv/install.log"
    : > "$log"
    # pip's own lines are kept in the log; the terminal gets one line per package as it goes.
    step() { while IFS= read -r line; do
        printf '%s\n' "$line" >> "$log"
        case "$line" in
            Collecting*) echo "  ${line}" >&2 ;;
            "Installing collected packages"*) echo "  installing..." >&2 ;;
            "Successfully installed"*) echo "  done" >&2 ;;
        esac
    done; }
    if ! { .venv/bin/python -m pip install --disable-pip-version-check -q --upgrade pip 2>&1 &&
           .venv/bin/python -m pip install --disable-pip-version-check --progress-bar off \
               -e ".${extras:+[$extras]}" 2>&1; } | step; then
        say "installing failed; the last lines of $log:"
        tail -n 20 "$log" >&2
        exit 1
    fi
    echo "$hash-$extras" > "$stamp"
fi
export PATH="$ROOT/.venv/bin:$PATH"
