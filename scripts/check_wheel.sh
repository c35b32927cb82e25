#!/usr/bin/env bash
# Checks that the self-contained CPU wheel (scripts/build_wheel.sh) needs nothing of the build machine
# but Python. Run it before stops (it builds the wheel first; about 1-2 minutes on a built CPU tree),
# or give it a wheel: scripts/check_wheel.sh [WHEEL]. Any failure ends it with a non-zero status.
#  1. The wheel is installed, with its dependencies from PyPI, into a fresh virtual environment
#     (build/wheel-check/venv).
#  2. Every library auditwheel vendored has its license in the wheel (.dist-info/licenses/third_party/).
#     ldd on every ELF file of the installed package (kiln/ and auditwheel's kiln.libs/), run with an
#     empty environment: each library resolves, and only to a file inside the package or to one of the
#     basic system libraries that every Linux has (libc, libm, libstdc++, libgcc_s, libpthread, libdl,
#     librt, ld-linux, and libz: the manylinux policy lets wheels use the system's zlib, so auditwheel
#     does not vendor it; Debian's and Ubuntu's zlib1g is Priority: required, and pip's own Python
#     needs it): no libdnnl, libprotobuf, libgomp, ... of this machine.
#  3. Under `env -i` with a minimal PATH, from another folder: `import kiln` runs the example model and
#     matches ONNX Runtime (.venv's), and the `kiln` command does info/build/run.
#  4. The same in a chroot (through a user namespace: `unshare -r -m`, no root needed) whose root holds
#     only Python (this Python's prefix, mounted read-only), the system libraries Python itself and the
#     basic list above need, the virtual environment and the example: the libraries of the build
#     machine are not there at all. Where user namespaces are not allowed this step says so and is
#     skipped (steps 1-3 still prove the package's own files).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
unset PYTHONPATH LD_LIBRARY_PATH
work=$root/build/wheel-check
if [ $# -ge 1 ]; then
  wheel=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
else
  scripts/build_wheel.sh build/wheelhouse > build/wheel-build.log 2>&1 ||
    { cat build/wheel-build.log; echo "scripts/build_wheel.sh failed"; exit 1; }
  wheel=$(tail -1 build/wheel-build.log)
fi
echo "wheel: $(basename "$wheel") ($(du -h "$wheel" | cut -f1))"
case "$(basename "$wheel")" in
  *manylinux*) ;;
  *) echo "$wheel is not a manylinux wheel (auditwheel repair names it so)"; exit 1 ;;
esac
rm -rf "$work"
mkdir -p "$work/run"
cp examples/tiny_cnn.onnx examples/tiny_cnn_input.npy "$work/run/"

echo "== the example model's expected output (onnxruntime in .venv)"
.venv/bin/python tests/install/ort_expected.py "$work/run/tiny_cnn.onnx" "$work/run/tiny_cnn_input.npy" "$work/run/expected.npy"

echo "== install into a fresh virtual environment (dependencies from PyPI)"
.venv/bin/python -m venv "$work/venv"
venv=$work/venv
"$venv/bin/python" -m pip install -q --disable-pip-version-check "$wheel"
site=$("$venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
[ -d "$site/kiln" ] || { echo "no kiln/ in $site"; exit 1; }
[ ! -e "$site/kiln/lib/libkiln_cuda.so" ] || { echo "the CPU wheel ships libkiln_cuda.so"; exit 1; }

echo "== ldd on every ELF file of the package, with an empty environment"
basic='^(linux-vdso\.so\.1|libc\.so\.6|libm\.so\.6|libstdc\+\+\.so\.6|libgcc_s\.so\.1|libpthread\.so\.0|libdl\.so\.2|librt\.so\.1|ld-linux-x86-64\.so\.2|libz\.so\.1)$'
elves=()
while IFS= read -r -d '' f; do
  if head -c 4 "$f" | grep -q "ELF"; then elves+=("$f"); fi
done < <(find "$site/kiln" "$site"/kiln.libs -type f -print0 2>/dev/null)
[ "${#elves[@]}" -ge 3 ] || { echo "found only ${#elves[@]} ELF files in the package"; exit 1; }
bad=0
system_libs=()
for f in "${elves[@]}"; do
  while read -r line; do
    name=$(echo "$line" | awk '{print $1}')
    path=$(echo "$line" | awk '$2 == "=>" {print $3}')
    case "$line" in *"not found"*) echo "${f#"$site/"}: $line"; bad=1; continue ;; esac
    [ -n "$path" ] || continue  # the vdso, or the loader named by its absolute path
    case "$(readlink -f "$path")" in
      "$(readlink -f "$site")"/kiln/* | "$(readlink -f "$site")"/kiln.libs/*) continue ;;
    esac
    if echo "$(basename "$name")" | grep -Eq "$basic"; then
      system_libs+=("$path")
    else
      echo "${f#"$site/"}: $name resolves outside the package, to $path"; bad=1
    fi
  done < <(env -i /usr/bin/ldd "$f")
done
[ "$bad" = 0 ] || { echo "the wheel is not self-contained"; exit 1; }
echo "${#elves[@]} ELF files; outside the package they need only: $(printf '%s\n' "${system_libs[@]}" | xargs -n1 basename | sort -u | xargs)"
[ -d "$site/kiln.libs" ] || { echo "no kiln.libs/ in $site: the wheel was not repaired by auditwheel"; exit 1; }
ls "$site"/kiln.libs > "$work/vendored.txt"
echo "vendored (kiln.libs/): $(xargs < "$work/vendored.txt")"
# Each vendored library's license is in the wheel (scripts/build_wheel.sh, tools/wheel_add_licenses.py).
third_party=$(echo "$site"/kiln-*.dist-info/licenses/third_party)
for lib in $(cat "$work/vendored.txt"); do
  pkg=$(grep -F "kiln.libs/$lib: " "$third_party/VENDORED.txt" | sed 's/.*(\(.*\))$/\1/' || true)
  [ -n "$pkg" ] && [ -s "$third_party/$pkg" ] || { echo "no license in the wheel for kiln.libs/$lib"; exit 1; }
done
echo "licenses of the vendored libraries: $(find "$third_party" -name "*.copyright" | wc -l) packages' copyright files"

# The Python check and the command check, run as given (env -i, or env -i in the chroot).
run_checks() {
  "$@" "$venv/bin/python" - "$work/run" <<'PY'
import os
import sys

import numpy as np

import kiln

run = sys.argv[1]
sess = kiln.InferenceSession(os.path.join(run, "tiny_cnn.onnx"), providers=["CPUExecutionProvider"])
(y,) = sess.run(None, {sess.get_inputs()[0].name: np.load(os.path.join(run, "tiny_cnn_input.npy"))})
want = np.load(os.path.join(run, "expected.npy"))
err = float(np.max(np.abs(y - want)))
print(f"  import kiln {kiln.__version__}: providers {kiln.get_available_providers()}, "
      f"output {y.shape}, max abs difference from onnxruntime {err:.3g}")
assert y.shape == want.shape and y.dtype == want.dtype and err <= 1e-4
# A CUDA request on the CPU wheel is refused with a reason, not a crash.
try:
    kiln.InferenceSession(os.path.join(run, "tiny_cnn.onnx"), providers=["CUDAExecutionProvider"])
    print("  a CUDA-only session: created (falls back to the CPU)")
except Exception as e:  # noqa: BLE001 - any clear error is what is wanted
    print(f"  a CUDA-only session: {type(e).__name__}: {str(e).splitlines()[0]}")
PY
  "$@" "$venv/bin/kiln" --version
  "$@" "$venv/bin/kiln" info "$work/run/tiny_cnn.onnx" > "$work/run/info.log" 2>&1 ||
    { cat "$work/run/info.log"; return 1; }
  "$@" "$venv/bin/kiln" build "$work/run/tiny_cnn.onnx" -o "$work/run/tiny_cnn.kiln" > "$work/run/build.log" 2>&1 ||
    { cat "$work/run/build.log"; return 1; }
  # The CPU wheel has no CUDA backend, and a CUDA engine request says so.
  if "$@" "$venv/bin/kiln" build "$work/run/tiny_cnn.onnx" --device cuda -o "$work/run/cuda.kiln" > "$work/run/cuda.log" 2>&1 ||
     ! grep -q "built without CUDA" "$work/run/cuda.log"; then
    cat "$work/run/cuda.log"; echo "kiln build --device cuda did not fail with \"built without CUDA\""; return 1
  fi
  echo "  kiln build --device cuda: $(grep -o "built without CUDA.*" "$work/run/cuda.log")"
  rm -rf "$work/run/out"
  "$@" "$venv/bin/kiln" run "$work/run/tiny_cnn.kiln" --input "image=$work/run/tiny_cnn_input.npy" \
    --output-dir "$work/run/out" > "$work/run/run.log" 2>&1 || { cat "$work/run/run.log"; return 1; }
  "$@" "$venv/bin/python" -c "
import sys, numpy as np
y, want = np.load('$work/run/out/probabilities.npy'), np.load('$work/run/expected.npy')
err = float(np.max(np.abs(y - want)))
print(f'  kiln info/build/run: max abs difference from onnxruntime {err:.3g}')
sys.exit(0 if y.shape == want.shape and err <= 1e-4 else 1)"
}

echo "== env -i (PATH=/usr/bin:/bin, no LD_LIBRARY_PATH, HOME or PYTHONPATH), from another folder"
cd "$work/run"
run_checks env -i PATH=/usr/bin:/bin HOME="$work/run"
cd "$root"

echo "== a chroot holding only Python, its own system libraries and the basic ones"
if ! unshare -r -m true 2> /dev/null; then
  echo "SKIPPED: user namespaces are not allowed here (unshare -r -m failed); steps above passed"
  echo "wheel check: clean (without the chroot)"
  exit 0
fi
base=$("$venv/bin/python" -c "import sys; print(sys.base_prefix)")
rootfs=$work/root
mkdir -p "$rootfs"/{usr/lib/x86_64-linux-gnu,usr/lib64,usr/bin,bin,tmp,dev,proc,etc}
ln -s usr/lib "$rootfs/lib"
ln -s usr/lib64 "$rootfs/lib64"
# Python's own libraries: those of the interpreter, its extension modules (lib-dynload) and of the
# dependencies' compiled modules (numpy, onnx: manylinux wheels), plus the basic list kiln needs.
# Left out: the modules kiln does not use that need libraries kiln vendors (_ssl, _hashlib: OpenSSL;
# _tkinter: Tk, X11, freetype, brotli), so that no vendored library has a system copy in the chroot.
libs=("${system_libs[@]}")
while IFS= read -r -d '' f; do
  while read -r p; do libs+=("$p"); done < <(env -i /usr/bin/ldd "$f" 2> /dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}')
done < <(find "$base/bin" "$base/lib" -maxdepth 1 -name "python3*" -type f -print0; \
         find "$base"/lib/python3*/lib-dynload -name "*.so" -not -name "_tkinter*" -not -name "_ssl*" \
           -not -name "_hashlib*" -print0; \
         find "$site" -name "*.so*" -not -path "*/kiln/*" -not -path "*/kiln.libs/*" -print0)
for p in $(printf '%s\n' "${libs[@]}" | sort -u); do
  case "$p" in "$base"/* | "$site"/*) continue ;; esac
  dest=$rootfs$(readlink -f "$(dirname "$p")")
  mkdir -p "$dest"
  cp -L "$p" "$dest/$(basename "$p")"
done
echo "  system libraries in the chroot: $(find "$rootfs/usr" -name "*.so*" -printf "%f\n" | sort | xargs)"
for lib in $(cat "$work/vendored.txt"); do
  stem=${lib%%-*}  # kiln.libs/libdnnl-1a2b3c4d.so.2: libdnnl must not be in the chroot
  if find "$rootfs" -name "${stem}[.-]*" | grep -q .; then echo "the chroot has $stem"; exit 1; fi
done
# The mounts: Python's prefix, the check folder (the venv and the example) at the same paths; /dev.
mkdir -p "$rootfs$base" "$rootfs$work/run" "$rootfs$venv"
# The command runs in the chroot as given (there is no shell there).
cat > "$work/in-chroot.sh" <<EOF
set -e
mount --rbind /dev "$rootfs/dev"
mount --rbind /proc "$rootfs/proc"
mount --bind -o ro "$base" "$rootfs$base"
mount --bind "$venv" "$rootfs$venv"
mount --bind "$work/run" "$rootfs$work/run"
exec /usr/sbin/chroot "$rootfs" "\$@"
EOF
in_chroot() { unshare -r -m /bin/sh "$work/in-chroot.sh" env -i PATH=/usr/bin:/bin HOME=/tmp "$@"; }
[ -x "$rootfs/usr/bin/env" ] || { cp -L /usr/bin/env "$rootfs/usr/bin/env"; }
run_checks in_chroot
echo "wheel check: clean"
