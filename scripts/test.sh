#!/usr/bin/env bash
# Lint, then run every test suite, each in the environment it belongs to, and print one closing line.
#   tests/ops      .venv          CLI, infra (Pulumi mocks), policy pack (incl. its gRPC analyzer), bootstrap
#   tests/trainer  .venv-trainer  trainer on CPU (single device, 2 logical devices, 2-process clusters)
#   tests/e2e      .venv          the user's path end to end (drives both environments)
#   checkov        .venv-scanners the example stack's exported plans, both access modes (after e2e)
# Usage: scripts/test.sh [ops] [trainer] [e2e] [-- extra pytest args]   (default: all three)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

suites=(); extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    ops|trainer|e2e) suites+=("$1") ;;
    --) shift; extra=("$@"); break ;;
    *) echo "error: unknown suite '$1' (use ops, trainer, e2e)" >&2; exit 2 ;;
  esac
  shift
done
[ ${#suites[@]} -gt 0 ] || suites=(ops trainer e2e)

for venv in .venv .venv-trainer; do
  if [ ! -x "$venv/bin/python" ]; then
    echo "error: $venv is missing; run scripts/setup.sh first" >&2; exit 2
  fi
done

# TPUCTL_TEST_REPORTS=DIR keeps the JUnit reports (per-test durations) in DIR; by default they go with the run.
if [ -n "${TPUCTL_TEST_REPORTS:-}" ]; then
  reports=$TPUCTL_TEST_REPORTS; mkdir -p "$reports" || exit 2
else
  reports=$(mktemp -d); trap 'rm -rf "$reports"' EXIT
fi
status=0

# Lint first: ruff (pyproject [tool.ruff]) and the layers contract (pyproject [tool.importlinter]).
echo "=== lint (ruff, import layers)"
if ! .venv/bin/python -m ruff check --no-cache .; then status=1; fi
if ! .venv/bin/lint-imports --no-cache; then status=1; fi
# Within the ops and trainer suites, pytest-xdist runs tests in TPUCTL_TEST_WORKERS processes (default: one per
# core, at least 2). Most tests wait (on subprocesses, servers, deadlines) more than they compute, so this fills
# idle time; --dist loadscope keeps each module's tests in one worker (a module's fixtures, e.g. a trained
# export, are built once). TPUCTL_TEST_WORKERS=0 runs each suite in one process.
workers=${TPUCTL_TEST_WORKERS:-$(( $(nproc 2>/dev/null || echo 1) > 2 ? $(nproc) : 2 ))}
case "$workers" in ''|*[!0-9]*) echo "error: TPUCTL_TEST_WORKERS must be a number, not '$workers'" >&2; exit 2 ;; esac
run_suite() {  # suite: run its tests with its own interpreter; returns 0 unless tests failed
  local suite=$1 py=.venv/bin/python rc started=$SECONDS spread=()
  [ "$suite" = trainer ] && py=.venv-trainer/bin/python
  # e2e: a few long tests, spread one by one (its module fixtures are cheap); the others by module (--dist loadscope
  # builds a module's expensive fixture once).
  if [ "$workers" -gt 0 ]; then
    if [ "$suite" = e2e ]; then spread=(-n "$workers" --dist load); else spread=(-n "$workers" --dist loadscope); fi
  fi
  echo "=== $suite tests ($py${spread[*]:+, ${spread[*]}})"
  if [ ! -d "tests/$suite" ]; then echo "no tests/$suite folder: nothing to run"; return 0; fi
  # Every process the suite starts inherits this token; what still carries it after the suite is a leak
  # (tests/fixtures/procfixtures.py): named, killed, and the suite fails.
  local token="$suite-$$-$RANDOM$RANDOM"
  TPUCTL_TEST_SUITE=$token "$py" -m pytest "tests/$suite" -p no:cacheprovider --junitxml="$reports/$suite.xml" \
    "${spread[@]}" "${extra[@]}"
  rc=$?
  echo "=== $suite tests: $(( SECONDS - started )) s"
  if ! .venv/bin/python tests/fixtures/procfixtures.py --leaks "$token"; then
    echo "=== $suite tests left the processes above running (now killed): a test or the code it runs leaks them"
    rc=1
  fi
  # exit 5 = no tests collected in this suite: not a failure of the suite.
  [ $rc -eq 0 ] || [ $rc -eq 5 ]
}
want() { [[ " ${suites[*]} " == *" $1 "* ]]; }
# Scanners: checkov judges the example stack's exported plans (tpuctl plan --format tfplan) in both access
# modes and fails on any finding policy/exceptions.yaml does not accept. Needs .venv-scanners
# (scripts/setup.sh --with-scanners); without it the step says so and is skipped.
run_checkov() {
  if [ -x .venv-scanners/bin/checkov ]; then
    echo "=== checkov (Pulumi.example.yaml, accessMode bucket and project)"
    local started=$SECONDS rc=0
    .venv/bin/python tests/ops/scanners/checkov_gate.py || rc=1
    echo "=== checkov: $(( SECONDS - started )) s"
    return $rc
  else
    echo "=== checkov: skipped (.venv-scanners is missing; run scripts/setup.sh --with-scanners)"
  fi
}
# Three lanes that share nothing (own interpreters, own temporary folders, free ports), side by side from the start:
# the ops suite, the trainer suite, and the tail (e2e, a few long tests driving both environments, then the checkov
# gate). Started together, the tail's tests fill the time the suites' workers wait, instead of running alone after
# the first suite ends (on a busy machine that serial tail got the smallest share of the CPU). With more than one
# core they run side by side, each lane's output kept whole and printed as it ends (TPUCTL_TEST_SERIAL=1 runs them
# one after the other).
lane_ops() {
  local rc=0
  if want ops; then run_suite ops || rc=1; fi
  return $rc
}
lane_trainer() {
  local rc=0
  if want trainer; then run_suite trainer || rc=1; fi
  return $rc
}
lane_tail() {
  local rc=0
  if want e2e; then run_suite e2e || rc=1; fi
  if want ops; then run_checkov || rc=1; fi
  return $rc
}
if [ "${TPUCTL_TEST_SERIAL:-0}" != 1 ] && [ "$(nproc 2>/dev/null || echo 1)" -gt 1 ]; then
  echo "=== three lanes side by side: ops | trainer | e2e, then checkov (each lane's output follows as it ends)"
  declare -A lane_of=()
  for lane in ops trainer tail; do
    "lane_$lane" >"$reports/lane-$lane.log" 2>&1 &
    lane_of[$!]=$lane
  done
  while [ ${#lane_of[@]} -gt 0 ]; do
    wait -n -p ended "${!lane_of[@]}" || status=1
    cat "$reports/lane-${lane_of[$ended]}.log"
    echo "=== the ${lane_of[$ended]} lane ended at $SECONDS s"
    unset "lane_of[$ended]"
  done
else
  lane_ops || status=1
  lane_trainer || status=1
  lane_tail || status=1
fi

.venv/bin/python - "$reports" <<'PY'
import sys, pathlib, xml.etree.ElementTree as ET
roots = [ET.parse(f).getroot() for f in sorted(pathlib.Path(sys.argv[1]).glob("*.xml"))]    # each report read once
passed = failed = skipped = 0
for suite in (s for root in roots for s in root.iter("testsuite")):
    t, fl, e, s = (int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped"))
    passed += t - fl - e - s; failed += fl + e; skipped += s
print(f"total: {passed} passed, {failed} failed, {skipped} skipped")
# Where the time goes: pytest's per-test durations (setup + call + teardown, from the JUnit reports) summed per module.
cases = [(float(c.get("time", 0) or 0), c.get("classname", "?"), c.get("name")) for root in roots
         for c in root.iter("testcase")]
modules = {}
for seconds, classname, _ in cases:
    parts = classname.split(".")
    name = ".".join(parts[:-1] if parts[-1][:1].isupper() else parts)    # a test class's module
    modules[name] = modules.get(name, 0.0) + seconds
top = sorted(modules.items(), key=lambda kv: -kv[1])[:15]
print("slowest modules (s, tests' own time summed; xdist runs 2 at once): "
      + ", ".join(f"{name.replace('tests.', '')} {seconds:.0f}" for name, seconds in top))
slowest = sorted(cases, key=lambda case: -case[0])[:10]
print("slowest tests (s): " + ", ".join(f"{classname.replace('tests.', '')}::{name} {seconds:.0f}"
                                        for seconds, classname, name in slowest))
PY
exit $status
