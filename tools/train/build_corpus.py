#!/usr/bin/env python3
"""Assembles the training corpus of the embedded default model from freely licensed text and
code that Debian installs on the development machine, for the embedded model.

    python3 tools/train/build_corpus.py OUT_DIR

Writes OUT_DIR/train.jsonl (one {"package", "path", "text"} per document) and OUT_DIR/SOURCES.md
(packages, licences, file counts, and the SHA-256 of the corpus). The held-out evaluation text is
models/hibana-tiny/heldout.txt, the project's own Python, which no Debian package contains.
Deterministic: files are taken in sorted order and nothing depends on the clock or hash seeds.
"""
import hashlib
import json
import os
import subprocess
import sys

# Python's standard library (PSF-2.0), minus its test suite.
PYTHON_STDLIB = "/usr/lib/python3.11"
# Man pages of these packages (sections 1, 5, 7, 8), rendered to plain text.
MAN_PACKAGES = {
    "coreutils": "GPL-3.0-or-later",
    "bash": "GPL-3.0-or-later",
    "grep": "GPL-3.0-or-later",
    "sed": "GPL-3.0-or-later",
    "tar": "GPL-3.0-or-later",
    "findutils": "GPL-3.0-or-later",
    "diffutils": "GPL-3.0-or-later",
    "make": "GPL-3.0-or-later",
    "cmake": "BSD-3-Clause",
    "perl": "Artistic-1.0 OR GPL-1.0-or-later",
    "curl": "curl (MIT-style)",
    "util-linux": "GPL-2.0-or-later and others (see copyright file)",
    "procps": "GPL-2.0-or-later and LGPL-2.0-or-later",
    "git-man": "GPL-2.0-only",
}
# Python modules of the python3-* packages in dist-packages are added too (dist_packages_docs),
# except python3-pygments (the first held-out choice; pip's vendored copy of it is in anyway).
MAX_DOC_BYTES = 200_000


def python_docs():
    for root, dirs, files in os.walk(PYTHON_STDLIB):
        dirs[:] = sorted(d for d in dirs if d not in ("test", "tests", "idle_test", "__pycache__",
                                                      "site-packages", "dist-packages"))
        for f in sorted(files):
            if f.endswith(".py"):
                yield "libpython3.11-stdlib", os.path.join(root, f)


def dist_packages_docs():
    """Python modules of Debian's python3-* packages (each under its own free licence, read
    from the package's copyright file), except the held-out one."""
    root = "/usr/lib/python3/dist-packages"
    for top in sorted(os.listdir(root)):
        path = os.path.join(root, top)
        if not os.path.isdir(path) or top in ("pygments", "__pycache__") or "." in top:
            continue
        pkg = owning_package(path)
        if pkg is None:
            continue
        for dirpath, dirs, files in os.walk(path):
            dirs[:] = sorted(d for d in dirs if d not in ("tests", "test", "__pycache__"))
            for f in sorted(files):
                if f.endswith(".py"):
                    yield pkg, os.path.join(dirpath, f)


def owning_package(path):
    r = subprocess.run(["dpkg", "-S", path], capture_output=True, text=True)
    if r.returncode != 0:
        return None
    return r.stdout.split(":")[0].strip()


# Packages whose copyright file is not machine-readable, read by hand.
LICENCE_OVERRIDES = {
    "python3-setuptools": "MIT",
    "python3-pkg-resources": "MIT",
    "python3-yaml": "MIT",
    "python3-lazr.uri, python3-lazr.restfulclient": "LGPL-3.0",
    "software-properties-common, python3-software-properties": "GPL-2.0-or-later",
}


def package_licence(pkg):
    """The first licence the package's machine-readable copyright file names."""
    if pkg in LICENCE_OVERRIDES:
        return LICENCE_OVERRIDES[pkg]
    try:
        for line in open(f"/usr/share/doc/{pkg}/copyright", encoding="utf-8", errors="replace"):
            if line.startswith("License:"):
                return line.split(":", 1)[1].strip() or "see copyright file"
    except OSError:
        pass
    return "see /usr/share/doc/%s/copyright" % pkg


def man_docs():
    for pkg in sorted(MAN_PACKAGES):
        try:
            files = subprocess.run(["dpkg", "-L", pkg], capture_output=True, text=True,
                                   check=True).stdout.split("\n")
        except subprocess.CalledProcessError:
            print(f"warning: package {pkg} is not installed; skipped", file=sys.stderr)
            continue
        for path in sorted(files):
            if any(path.startswith(f"/usr/share/man/man{s}/") for s in "1578") and os.path.isfile(path):
                yield pkg, path


def render_man(path):
    env = dict(os.environ, MANWIDTH="80", MAN_KEEP_FORMATTING="0", LANG="C.UTF-8")
    out = subprocess.run(["man", "-l", path], capture_output=True, env=env).stdout
    text = subprocess.run(["col", "-bx"], input=out, capture_output=True).stdout
    return text.decode("utf-8", errors="replace")


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    digest = hashlib.sha256()
    counts, sizes = {}, {}
    with open(os.path.join(out_dir, "train.jsonl"), "w", encoding="utf-8") as f:
        for pkg, path in list(python_docs()) + list(dist_packages_docs()) + list(man_docs()):
            if path.startswith("/usr/share/man/"):
                text = render_man(path)
            else:
                text = open(path, encoding="utf-8", errors="replace").read()
            text = text.strip("\n") + "\n"
            if len(text) < 64:
                continue
            text = text[:MAX_DOC_BYTES]
            f.write(json.dumps({"package": pkg, "path": path, "text": text}, ensure_ascii=False) + "\n")
            digest.update(path.encode() + b"\0" + text.encode("utf-8"))
            counts[pkg] = counts.get(pkg, 0) + 1
            sizes[pkg] = sizes.get(pkg, 0) + len(text.encode("utf-8"))
    licences = {pkg: package_licence(pkg) for pkg in counts}
    licences.update({"libpython3.11-stdlib": "PSF-2.0", **MAN_PACKAGES})
    with open(os.path.join(out_dir, "SOURCES.md"), "w") as f:
        f.write("# Corpus sources\n\n| package | licence | documents | bytes |\n| --- | --- | --- | --- |\n")
        for pkg in sorted(counts):
            f.write(f"| {pkg} | {licences[pkg]} | {counts[pkg]} | {sizes[pkg]} |\n")
        f.write("\nHeld-out evaluation text: models/hibana-tiny/heldout.txt (the project's own "
                "Python tools), which no Debian package contains. (Pygments cannot serve: pip "
                "vendors a copy of it.)\n")
        f.write(f"\nCorpus SHA-256 (paths and texts in order): {digest.hexdigest()}\n")
        f.write("Full licence texts: /usr/share/doc/<package>/copyright on a Debian 12 system.\n")
    print(f"{sum(counts.values())} documents, {sum(sizes.values())} bytes, sha256 {digest.hexdigest()}")


if __name__ == "__main__":
    main()
