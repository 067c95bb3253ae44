# Shared by the reliability tests (sourced): each is a script run by CTest as
#   <test>.sh LOCKSTEP_BINARY WORK_DIR
# with real processes, bounded in count and time, on loopback only; it
# prints PASS last when every check held.
set -uo pipefail
bin=$1
work=$2
rm -rf "$work"
mkdir -p "$work"
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
# wait_for FILE PATTERN SECONDS: until FILE holds PATTERN (grep -E).
wait_for() {
  local until=$((SECONDS + $3))
  while ((SECONDS < until)); do
    grep -qE -- "$2" "$1" 2>/dev/null && return 0
    sleep 0.05
  done
  return 1
}
