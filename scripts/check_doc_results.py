#!/usr/bin/env python3
"""Checks that every measured figure in README.md and docs/*.md says where its raw output is.

    python3 scripts/check_doc_results.py [REPOSITORY_ROOT]

Each table or paragraph of measured figures carries a marker on a line of its own:

    <!-- results: bench/results/FOLDER -->     the figures come from that committed folder
    <!-- results: none -->                     no raw output was kept; the visible text
                                               "not reproducible: no raw output" must follow
                                               within the next 3 lines

Fails (exit 1, one file:line each) when a named folder does not exist, or holds no file git knows
of (in a git checkout: a folder only on one machine backs nothing), when a `none` marker lacks its
visible note, when a marker is malformed, or when no marker is found at all (so that deleting
them cannot make the check pass). The check cannot see a figure that has no marker: reviews do.
"""
import os
import re
import subprocess
import sys

MARKER = re.compile(r"^\s*<!--\s*results:\s*(?P<value>.*?)\s*-->\s*$")
LOOSE = re.compile(r"<!--\s*results?\b", re.IGNORECASE)
NOTE = "not reproducible: no raw output"
NOTE_WITHIN = 3  # lines after a `none` marker
RESULTS = "bench/results/"


def tracked_folders(root):
    """The folders under bench/results/ that hold a file git knows of (tracked or added), or None
    outside a git checkout."""
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z", "--", RESULTS], capture_output=True,
                             check=True).stdout.decode()
    except (OSError, subprocess.CalledProcessError):
        return None
    folders = set()
    for path in filter(None, out.split("\0")):
        parts = path.split("/")
        for i in range(3, len(parts)):
            folders.add("/".join(parts[:i]))
    return folders


def documents(root):
    docs = [os.path.join(root, "README.md")]
    docs_dir = os.path.join(root, "docs")
    if os.path.isdir(docs_dir):
        docs += sorted(os.path.join(docs_dir, f) for f in os.listdir(docs_dir) if f.endswith(".md"))
    return [d for d in docs if os.path.isfile(d)]


def check(root):
    """Returns (problems, counts): problems as 'file:line: message'."""
    problems, backed, unbacked = [], 0, 0
    tracked = tracked_folders(root)
    for path in documents(root):
        rel = os.path.relpath(path, root)
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
        for i, line in enumerate(lines):
            where = "%s:%d" % (rel, i + 1)
            m = MARKER.match(line)
            if not m:
                if LOOSE.search(line):
                    problems.append("%s: malformed marker (want '<!-- results: bench/results/FOLDER -->' or "
                                    "'<!-- results: none -->' on a line of its own): %s" % (where, line.strip()))
                continue
            value = m.group("value")
            if value == "none":
                unbacked += 1
                following = lines[i + 1:i + 1 + NOTE_WITHIN]
                if not any(NOTE in l.lower() and not MARKER.match(l) for l in following):
                    problems.append("%s: 'results: none' without the visible note '%s' in the next %d lines"
                                    % (where, NOTE, NOTE_WITHIN))
                continue
            folder = value.rstrip("/")
            if not folder.startswith(RESULTS) or ".." in folder.split("/") or folder == RESULTS.rstrip("/"):
                problems.append("%s: '%s' is neither 'none' nor a folder under %s" % (where, value, RESULTS))
                continue
            backed += 1
            if not os.path.isdir(os.path.join(root, folder)):
                problems.append("%s: %s does not exist" % (where, folder))
            elif tracked is not None and folder not in tracked:
                problems.append("%s: %s holds no file git knows of (add and commit the raw output)" % (where, folder))
    if backed + unbacked == 0:
        problems.append("%s: no '<!-- results: ... -->' marker in README.md or docs/*.md" % root)
    return problems, backed, unbacked


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    problems, backed, unbacked = check(root)
    if problems:
        print("check_doc_results: %d problem(s):" % len(problems))
        for p in problems:
            print("  " + p)
        return 1
    print("check_doc_results: %d markers, %d naming a results folder, %d saying there is no raw output"
          % (backed + unbacked, backed, unbacked))
    return 0


if __name__ == "__main__":
    sys.exit(main())
