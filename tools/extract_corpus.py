#!/usr/bin/env python3
"""Rebuild data/jargon-4.4.7-prose.txt, the text that ft perplexity and
ft compare score, from Debian's jargon-text package: The Jargon File 4.4.7
by Eric S. Raymond et al., which is in the public domain (the package's
copyright file: "This document (the Jargon File) is in the public domain,
to be freely used, shared, and modified").

It keeps the running prose: chapters 1-12 (hacker slang and culture,
writing and speech style, ...) and appendices A-C (folklore, a portrait of
J. Random Hacker, helping hacker culture grow). The glossary entries, the
tables of contents and the bibliography are left out, and the three-space
indentation of the plain-text edition is removed. Deterministic: the same
package gives the same bytes.

Usage: tools/extract_corpus.py [OUT]   (needs apt-get and dpkg-deb;
run 'apt-get update' first on a fresh machine)
"""
import glob
import gzip
import hashlib
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "data" / "jargon-4.4.7-prose.txt"

with tempfile.TemporaryDirectory() as tmp:
    subprocess.run(["apt-get", "download", "jargon-text"], cwd=tmp, check=True, capture_output=True)
    deb = glob.glob(f"{tmp}/jargon-text_*.deb")[0]
    subprocess.run(["dpkg-deb", "-x", deb, f"{tmp}/x"], check=True)
    src = gzip.open(f"{tmp}/x/usr/share/doc/jargon-text/jargon.txt.gz", "rt", encoding="utf-8").read()

lines = src.split("\n")
# Headings sit at column 0 and use no-break spaces ("Chapter\u00a01.\u00a0...").
start = next(i for i, l in enumerate(lines) if l.startswith("Chapter"))
glossary = next(i for i, l in enumerate(lines) if l == "Glossary")
appendix = next(i for i, l in enumerate(lines) if l.startswith("Appendix"))
biblio = next(i for i, l in enumerate(lines) if l == "Bibliography")
keep = lines[start:glossary] + lines[appendix:biblio]

text = []
i = 0
while i < len(keep):
    line = keep[i]
    if line.strip() == "Table of Contents":
        # Entries: one short line each, blank lines between; the chapter's
        # prose starts with a line that continues on the next one.
        i += 1
        while i < len(keep):
            l = keep[i]
            nxt = keep[i + 1] if i + 1 < len(keep) else ""
            if l.strip() == "" or (l.startswith("   ") and len(l) < 70 and nxt.strip() == ""):
                i += 1
                continue
            break
        continue
    text.append(line[3:] if line.startswith("   ") else line)
    i += 1

# Collapse runs of blank lines.
result, blank = [], False
for l in text:
    if l.strip() == "":
        if not blank:
            result.append("")
        blank = True
    else:
        result.append(l.rstrip())
        blank = False
data = ("\n".join(result).strip() + "\n").encode("utf-8")
out.write_bytes(data)
print(f"{out}: {len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()}")
