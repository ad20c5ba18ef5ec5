# Sourced by scripts/run and scripts/test: find Python >= 3.12, then create or
# refresh .venv so that it matches pyproject.toml. Safe to run on a fresh clone
# of a fresh machine and cheap when nothing changed (a stamp holds the hash of
# pyproject.toml and of the interpreter it was built with).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${RECORDER_VENV:-$ROOT/.venv}"

find_python() {
    local candidate
    # An explicit choice wins; then whatever is on PATH; then pyenv's installs,
    # because on these machines python3 is 3.11 and 3.12 lives only under pyenv.
    for candidate in "${RECORDER_PYTHON:-}" python3.13 python3.12 python3; do
        [ -n "$candidate" ] || continue
        if command -v "$candidate" >/dev/null 2>&1 &&
            "$candidate" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' 2>/dev/null; then
            command -v "$candidate"
            return 0
        fi
    done
    local root="${PYENV_ROOT:-$HOME/.pyenv}"
    if command -v pyenv >/dev/null 2>&1; then root="$(pyenv root)"; fi
    local found=""
    for candidate in "$root"/versions/3.1[2-9]*/bin/python3; do
        [ -x "$candidate" ] || continue
        case "$candidate" in *-dev*|*t/bin/*) continue ;; esac
        found="$candidate"   # the glob sorts ascending: keep the newest
    done
    if [ -n "$found" ]; then echo "$found"; return 0; fi
    echo "recorder: no Python >= 3.12 found (tried RECORDER_PYTHON, PATH and pyenv)." >&2
    echo "recorder: install one (e.g. 'pyenv install 3.12') and run this again." >&2
    return 1
}

ensure_venv() {
    local py want have
    py="$(find_python)"
    if [ -x "$VENV/bin/python" ] &&
        ! "$VENV/bin/python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' 2>/dev/null; then
        rm -rf "$VENV"
    fi
    if [ ! -x "$VENV/bin/python" ]; then
        echo "recorder: creating $VENV with $py" >&2
        "$py" -m venv "$VENV"
    fi
    # (the C sources too: the install compiles them, so an edited one must reinstall)
    want="$(cat "$ROOT/pyproject.toml" "$VENV/pyvenv.cfg" "$ROOT"/recorder/core/protocols/*.c "$ROOT"/recorder/proxy/*.c |
        sha256sum | cut -d' ' -f1)-${1:-run}"
    have="$(cat "$VENV/.recorder-stamp-${1:-run}" 2>/dev/null || true)"
    if [ "$want" != "$have" ]; then
        echo "recorder: installing dependencies into $VENV (log: $VENV/install.log)" >&2
        # every extra: the two commands install everything (pyproject.toml)
        local target="$ROOT[all]"
        if [ "${1:-run}" = "dev" ]; then target="$ROOT[dev]"; fi
        # pip's and setuptools' chatter goes to the log; it is shown only on failure
        if ! { "$VENV/bin/python" -m pip install --disable-pip-version-check --upgrade pip &&
            "$VENV/bin/python" -m pip install --disable-pip-version-check -e "$target"; } \
            >"$VENV/install.log" 2>&1; then
            cat "$VENV/install.log" >&2
            echo "recorder: installing dependencies failed (see above)" >&2
            return 1
        fi
        echo "$want" >"$VENV/.recorder-stamp-${1:-run}"
    fi
}
