"""Adds the licenses of the libraries auditwheel vendored to a repaired wheel (scripts/build_wheel.sh).

For each file of NAME.libs/ (auditwheel's `libdnnl-1a2b3c4d.so.2.6` is the system's `libdnnl.so.2.6`),
finds the system library it was copied from in the given folders, the Debian package that owns it
(`dpkg -S`), and that package's /usr/share/doc/PACKAGE/copyright. Each copyright file goes into the
wheel as DIST-INFO/licenses/third_party/PACKAGE.copyright, named in METADATA (License-File, PEP 639),
with third_party/VENDORED.txt mapping every vendored file to its package; RECORD is rewritten. Fails
when a vendored file's package or copyright cannot be found.

Usage: python wheel_add_licenses.py WHEEL LIBDIR...   (the wheel is rewritten in place)
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import subprocess
import sys
import zipfile


def record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def system_name(vendored: str) -> str:
    """libdnnl-a4f9d805.so.2.6 -> libdnnl.so.2.6 (auditwheel inserts -HASH8 before .so)."""
    m = re.fullmatch(r"(.+)-[0-9a-f]{8}(\.so.*)", vendored)
    if not m:
        sys.exit(f"wheel_add_licenses: {vendored} is not named as auditwheel names vendored libraries")
    return m.group(1) + m.group(2)


def owner(path: str) -> str:
    """The Debian package that installed `path` (its real path, as dpkg records merged-/usr files)."""
    for p in dict.fromkeys([path, os.path.realpath(path)]):
        r = subprocess.run(["dpkg", "-S", p], capture_output=True, text=True)
        if r.returncode == 0:
            return r.stdout.split(":", 1)[0].strip()
    sys.exit(f"wheel_add_licenses: no Debian package owns {path} (dpkg -S)")


def main() -> None:
    wheel, libdirs = sys.argv[1], sys.argv[2:]
    with zipfile.ZipFile(wheel) as z:
        entries = [(info, z.read(info)) for info in z.infolist()]
    names = [info.filename for info, _ in entries]
    dist_info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
    vendored = sorted(n for n in names if re.match(r"[^/]+\.libs/[^/]+$", n))
    if not vendored:
        sys.exit(f"wheel_add_licenses: {wheel} has no vendored libraries")
    packages: dict[str, str] = {}  # package -> its copyright text
    lines = []
    for n in vendored:
        base = system_name(os.path.basename(n))
        found = [os.path.join(d, base) for d in libdirs if os.path.exists(os.path.join(d, base))]
        if not found:
            sys.exit(f"wheel_add_licenses: {base} (vendored as {n}) is in none of {libdirs}")
        pkg = owner(found[0])
        copyright_file = f"/usr/share/doc/{pkg}/copyright"
        if not os.path.isfile(copyright_file):
            sys.exit(f"wheel_add_licenses: {pkg} (owner of {found[0]}) has no {copyright_file}")
        with open(copyright_file, "rb") as f:
            packages[pkg] = f.read()
        lines.append(f"{n}: {base} from the Debian package {pkg} ({pkg}.copyright)")
    added = {f"{dist_info}/licenses/third_party/{pkg}.copyright": text for pkg, text in sorted(packages.items())}
    added[f"{dist_info}/licenses/third_party/VENDORED.txt"] = (
        "The libraries in this wheel's .libs folder, copied from Debian packages by auditwheel:\n"
        + "\n".join(lines) + "\n").encode()

    out = []
    for info, data in entries:
        if info.filename == f"{dist_info}/RECORD" or info.filename in added:
            continue
        if info.filename == f"{dist_info}/METADATA":
            text = data.decode()
            head, sep, body = text.partition("\n\n")
            extra = "".join(f"License-File: {k.split('/licenses/', 1)[1]}\n" for k in added)
            data = (head.rstrip("\n") + "\n" + extra.rstrip("\n") + sep + body).encode()
        out.append((info, data))
    for name, data in added.items():
        info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
        info.external_attr = 0o644 << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        out.append((info, data))
    record = "".join(f"{info.filename},{record_hash(data)},{len(data)}\n" for info, data in out
                     if not info.filename.endswith("/"))
    record += f"{dist_info}/RECORD,,\n"
    rinfo = zipfile.ZipInfo(f"{dist_info}/RECORD", date_time=(1980, 1, 1, 0, 0, 0))
    rinfo.external_attr = 0o644 << 16
    rinfo.compress_type = zipfile.ZIP_DEFLATED
    out.append((rinfo, record.encode()))
    tmp = wheel + ".tmp"
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for info, data in out:
            z.writestr(info, data)
    os.replace(tmp, wheel)
    print(f"{len(packages)} licenses of vendored packages added: {' '.join(sorted(packages))}")


if __name__ == "__main__":
    main()
