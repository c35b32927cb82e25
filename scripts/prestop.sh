#!/usr/bin/env bash
# The checks a developer runs before every stop, as a new user and CI would meet main: a fresh clone of
# this checkout's main into a new folder, then there, with nothing carried over (no build folders,
# virtual environments or compiler cache of this checkout):
#   1. the README's first command, scripts/setup.sh (dependencies, build, the bundled example);
#   2. the model zoo's CI subset, as .ci/run makes it (scripts/setup_zoo.sh, export.py --small);
#   3. the README's second command, scripts/test.sh, with --weakest-all (every suite, again with the
#      CPU capped to the weakest ISA, the whole Python suite too; and the skipped tests per reason);
#   3b. the self-contained CPU wheel (scripts/check_wheel.sh: auditwheel, then a fresh environment under
#      env -i and in a chroot without the build's libraries; with a CUDA build/, its own CPU-only build);
#   4. the whole extreme-attribute sweep, one case per op, attribute and value (tools/attr_sweep.py
#      --dedupe; CI runs a 150-case sample of it in the Python suite);
#   4b. the server's request soak at full size: 10^6 tiny requests over kept-alive connections
#      (tests/python/test_serve.py with KILN_SERVE_SOAK_REQUESTS; CI sends 20,000; about 5 minutes);
#   5. kiln.ray_serve on a local Ray (scripts/setup_ray.sh, tests/ray/; not in CI: Ray is large);
#   6. the ThreadSanitizer job (scripts/tsan.sh: its own build, the runtime, thread-pool and batcher
#      tests; not in CI);
#   7. with --sanitize, CI's sanitizer job (scripts/sanitize.sh; about 18 more minutes), then 20 minutes
#      of the structure-aware model fuzzer and 5 of the server's parsers, each with a random seed
#      (tests/fuzz/README.md, "Exploration").
# Each step's wall time is printed; the first failure stops it. Usage:
#   scripts/prestop.sh [--sanitize] [FOLDER]     (FOLDER: where to clone; default a new temporary one)
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
sanitize=0
dir=""
for a in "$@"; do
  case "$a" in
    --sanitize) sanitize=1 ;;
    -*) echo "usage: $0 [--sanitize] [FOLDER]" >&2; exit 2 ;;
    *) dir=$a ;;
  esac
done
[ -n "$dir" ] || dir=$(mktemp -d "${TMPDIR:-/tmp}/kiln-prestop.XXXXXX")
mkdir -p "$dir"
clone="$dir/kiln"
[ ! -e "$clone" ] || { echo "prestop: $clone exists; give an empty folder" >&2; exit 2; }
git clone -q --branch main "$src" "$clone"
cd "$clone"
echo "prestop: fresh clone of main ($(git log --oneline -1)) in $clone"
step() {
  local name=$1
  shift
  local t0=$SECONDS
  echo "== prestop: $name"
  "$@"
  echo "== prestop: $name took $((SECONDS - t0)) s"
}
export CCACHE_DISABLE=1  # a cold build, as on a fresh machine
step "scripts/setup.sh" scripts/setup.sh
step "model zoo CI subset" bash -c 'scripts/setup_zoo.sh && .venv-zoo/bin/python bench/zoo/export.py --small'
step "scripts/test.sh --weakest-all" scripts/test.sh --weakest-all
step "self-contained CPU wheel (scripts/check_wheel.sh)" scripts/check_wheel.sh
step "attribute sweep (tools/attr_sweep.py --dedupe)" .venv/bin/python tools/attr_sweep.py --dedupe --jobs 2 \
  --json build/attr_sweep.json
step "server soak, 10^6 requests" env KILN_SERVE_SOAK_REQUESTS=1000000 .venv/bin/python -m pytest -q \
  -p no:cacheprovider tests/python/test_serve.py -k many_tiny_requests
step "Ray Serve (scripts/setup_ray.sh, tests/ray)" bash -c \
  'scripts/setup_ray.sh && .venv-ray/bin/python -m pytest -q -p no:warnings tests/ray'
step "ThreadSanitizer (scripts/tsan.sh)" scripts/tsan.sh
[ "$sanitize" = 0 ] || step "scripts/sanitize.sh" scripts/sanitize.sh
[ "$sanitize" = 0 ] || step "exploring fuzz_model run (random seed, 20 min)" \
  scripts/sanitize.sh --no-tests --fuzz-targets model --fuzz-seconds 1200 --seed 0
[ "$sanitize" = 0 ] || step "exploring fuzz_serve run (random seed, 5 min)" \
  scripts/sanitize.sh --no-tests --fuzz-targets serve --fuzz-seconds 300 --seed 0
echo "prestop: all passed"
