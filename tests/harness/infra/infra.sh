#!/usr/bin/env bash
# Offline checks of the Terraform in infra/ (no provider plugin, no AWS):
#
#   infra.sh install   create the two cache venvs once (python-hcl2; checkov)
#   infra.sh check     run all three checks below; exit non-zero if one fails
#
# 1. check_terraform.py: parses infra/ with python-hcl2 and asserts its
#    structure (functions, triggers, queue policy, IAM scoping, tables, ...)
#    and matches the event rules against functions/*/events/*.json;
# 2. checkov -d infra --framework terraform (every skip is justified next to
#    its resource, and check_terraform.py checks that it is);
# 3. terraform fmt -check -recursive infra, where a terraform binary is on
#    the PATH (skipped, with a note, where not).
#
# Environment:
#   NODEWRIGHT_CACHE   cache root (default $HOME/.cache/nodewright); venvs in
#                      $NODEWRIGHT_CACHE/infra-hcl-venv and .../infra-checkov-venv
#   PYTHON             interpreter for the venvs (default python3, >= 3.9)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
CACHE="${NODEWRIGHT_CACHE:-${HOME:?HOME is not set}/.cache/nodewright}"

die() { echo "infra.sh: error: $*" >&2; exit 1; }
note() { echo "infra.sh: $*" >&2; }

# venv NAME REQUIREMENTS IMPORT-CHECK
ensure_venv() {
  local venv="$CACHE/$1" reqs="$HERE/$2" probe="$3"
  local py="${PYTHON:-python3}" want stamp
  command -v "$py" >/dev/null 2>&1 || die "'$py' not found (set PYTHON=/path/to/python3)"
  mkdir -p "$CACHE"
  exec 8>"$venv.lock"
  flock 8 2>/dev/null || true
  want="$(sha256sum "$reqs" | cut -d' ' -f1)"
  stamp="$venv/.nodewright-requirements.sha256"
  if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]] && "$venv/bin/python" -c "$probe" >/dev/null 2>&1; then
    exec 8>&-
    return 0
  fi
  note "creating $venv (pip install -r $2)"
  rm -rf "$venv"
  "$py" -m venv "$venv" || die "'$py -m venv' failed (on Debian: apt-get install python3-venv)"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$reqs" \
    || { rm -rf "$venv"; die "pip install -r $reqs failed"; }
  "$venv/bin/python" -c "$probe" || { rm -rf "$venv"; die "$1 does not work after install"; }
  echo "$want" >"$stamp"
  exec 8>&-
}

cmd_install() {
  ensure_venv infra-hcl-venv requirements-hcl.txt 'import hcl2'
  ensure_venv infra-checkov-venv requirements-checkov.txt 'import checkov'
}

cmd_check() {
  cmd_install
  local rc=0

  echo "== infra: structure and event patterns (check_terraform.py)"
  "$CACHE/infra-hcl-venv/bin/python" "$HERE/check_terraform.py" "$ROOT" || rc=1

  echo "== infra: checkov"
  # --skip-download: no Bridgecrew platform; the built-in checks only.
  (cd "$ROOT" && "$CACHE/infra-checkov-venv/bin/checkov" -d infra --framework terraform \
      --skip-download --quiet --compact) || rc=1

  echo "== infra: terraform fmt"
  if command -v terraform >/dev/null 2>&1; then
    (cd "$ROOT" && terraform fmt -check -recursive -diff infra 2>/dev/null) || { echo "terraform fmt: infra/ is not formatted (run: terraform fmt -recursive infra)"; rc=1; }
  else
    echo "terraform fmt: skipped (no terraform binary on the PATH)"
  fi
  return "$rc"
}

case "${1:-}" in
  install) cmd_install ;;
  check) cmd_check ;;
  *) sed -n '2,5p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
