#!/bin/sh
# export-map.sh HEADER — print the linker version script of libdeepinfer.so: every function HEADER
# declares (the public di_ API) global, every other symbol local.  The names come from the
# preprocessed header, so comments and disabled code export nothing; $CC is the compiler (cc).
set -eu
header=${1:?usage: export-map.sh HEADER}
names=$(${CC:-cc} -E -P -Iinclude "$header" | grep -oE '\bdi_[A-Za-z0-9_]+[[:space:]]*\(' | tr -d ' (' | sort -u)
if [ -z "$names" ]; then
    echo "export-map.sh: no di_ function declared in $header" >&2
    exit 1
fi
echo "/* generated from $header by tools/export-map.sh */"
echo "{"
echo "  global:"
for n in $names; do echo "    $n;"; done
echo "  local: *;"
echo "};"
