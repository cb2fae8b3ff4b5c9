#!/usr/bin/env bash
# Makes .gpu-bundle/ from a build here (deploy/build.sh first): what a GPU node without this
# project's Debian packages needs besides its own PyTorch (deploy/gpu-node.sh uses it there).
#   bin/   shoald and shoal, stripped (they load no LibTorch, so they run as built here)
#   lib/   the shared libraries they and the worker need beyond the C and C++ runtimes
#   gen/   the generated protobuf messages (no protoc needed there)
#   include/  exactly the headers the worker's sources include from protobuf, Boost,
#          nlohmann-json, CLI11 and zlib (read from the build's dependency files)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${SHOAL_BUILD_DIR:-build}
OUT=${1:-.gpu-bundle}
[ -x "$BUILD/bin/shoald" ] || { echo "no $BUILD/bin/shoald: run deploy/build.sh first" >&2; exit 1; }
rm -rf "$OUT"
mkdir -p "$OUT/bin" "$OUT/lib" "$OUT/gen/shoal/v1" "$OUT/gen/shoal/ipc/v1" "$OUT/include"

for b in shoald shoal shoal-leader; do strip -o "$OUT/bin/$b" "$BUILD/bin/$b"; done

# Libraries: every one the daemon and the CLI load but the C and C++ runtimes (the node has its
# own, newer); the worker's own needs beyond LibTorch are protobuf and zlib, which they load too.
skip='^(linux-vdso|libc\.|libm\.|libdl\.|librt\.|libpthread\.|ld-linux|libstdc\+\+|libgcc_s)'
for b in "$BUILD/bin/shoald" "$BUILD/bin/shoal" "$BUILD/bin/shoal-leader"; do
  ldd "$b" | awk '$3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  if [[ ! $name =~ $skip ]]; then cp -L "$path" "$OUT/lib/$name"; fi
done

cp "$BUILD"/proto/shoal/v1/shoal.pb.{cc,h} "$OUT/gen/shoal/v1/"
cp "$BUILD"/proto/shoal/ipc/v1/ipc.pb.{cc,h} "$OUT/gen/shoal/ipc/v1/"

# Headers: those the worker's objects were compiled with, from the packages it needs.
find "$BUILD"/proto "$BUILD"/shared "$BUILD"/worker -name '*.o.d' -print0 |
  xargs -0 cat | tr ' \\' '\n\n' |
  grep -E '^/usr/include/(boost/|nlohmann/|CLI/|google/protobuf/|zlib\.h|zconf\.h)' | sort -u |
  while read -r h; do
    mkdir -p "$OUT/include/$(dirname "${h#/usr/include/}")"
    cp "$h" "$OUT/include/${h#/usr/include/}"
  done
# The unversioned names the linker looks for.
for l in "$OUT"/lib/libprotobuf.so.* "$OUT"/lib/libz.so.*; do ln -sf "$(basename "$l")" "${l%%.so.*}.so"; done
echo "$OUT: $(du -sh "$OUT" | cut -f1) ($(ls "$OUT/lib" | wc -l) libraries, $(find "$OUT/include" -type f | wc -l) headers)"
