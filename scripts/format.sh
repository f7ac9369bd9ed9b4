#!/usr/bin/env bash
# clang-format on the tracked C++ files, with the repository's .clang-format.
#   scripts/format.sh --check   report what does not follow the style; exits 1 if anything
#                               would change (clang-format --dry-run -Werror)
#   scripts/format.sh --fix     reformat those files in place
# Optional paths after the mode restrict it to those files or directories (tracked files only).
# Needs clang-format >= 14 (Debian 12: apt-get install clang-format); $CLANG_FORMAT overrides.
set -euo pipefail
cd "$(dirname "$0")/.."
mode="${1:-}"
case "$mode" in
  --check|--fix) shift ;;
  *) echo "usage: scripts/format.sh --check|--fix [path ...]" >&2; exit 2 ;;
esac
clang_format="${CLANG_FORMAT:-clang-format}"
if ! command -v "$clang_format" > /dev/null; then
  echo "scripts/format.sh: $clang_format not found (Debian/Ubuntu: apt-get install clang-format)" >&2
  exit 2
fi
files=()
while IFS= read -r -d '' f; do files+=("$f"); done < <(git ls-files -z -- "${@:-.}" | grep -zE '\.(c|cc|cpp|cxx|h|hh|hpp|hxx)$' || true)
if [ ${#files[@]} -eq 0 ]; then
  echo "scripts/format.sh: no tracked C++ files" >&2
  exit 0
fi
if [ "$mode" = --check ]; then
  if printf '%s\0' "${files[@]}" | xargs -0 "$clang_format" --style=file --dry-run -Werror; then
    echo "format: ${#files[@]} files follow .clang-format"
  else
    echo "format: some files do not follow .clang-format (scripts/format.sh --fix reformats them)" >&2
    exit 1
  fi
else
  printf '%s\0' "${files[@]}" | xargs -0 "$clang_format" --style=file -i
  echo "format: ${#files[@]} files formatted"
fi
