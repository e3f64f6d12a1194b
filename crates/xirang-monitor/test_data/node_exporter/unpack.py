#!/usr/bin/env python3
"""Unpacks sys.ttar (an excerpt of node_exporter's collector/fixtures/sys.ttar, in the
ttar text-archive format) into ./sys, the tree the parity test reads. Run from this
directory; the unpacked tree is committed, so tests need no Python."""
import os, shutil

def unpack(path):
    lines = open(path, encoding="utf-8").read().split("\n")
    i = 0
    if os.path.exists("sys"):
        shutil.rmtree("sys")
    while i < len(lines):
        l = lines[i]
        i += 1
        if l.startswith("#") or not l:
            continue
        if l.startswith("Directory: "):
            os.makedirs(l[len("Directory: "):], exist_ok=True)
        elif l.startswith("Path: "):
            p = l[len("Path: "):]
            nxt = lines[i]
            i += 1
            os.makedirs(os.path.dirname(p), exist_ok=True)
            if nxt.startswith("SymlinkTo: "):
                os.symlink(nxt[len("SymlinkTo: "):], p)
            elif nxt.startswith("Lines: "):
                n = int(nxt[len("Lines: "):])
                body = lines[i:i + n]
                i += n
                text = "\n".join(body) + ("\n" if n else "")
                # ttar marks a last line without newline with the suffix NULLBYTE/EOF
                if text.endswith("EOF\n"):
                    text = text[:-len("EOF\n")]
                with open(p, "w", encoding="utf-8") as f:
                    f.write(text)
            else:
                raise SystemExit(f"line {i}: expected SymlinkTo: or Lines:, found {nxt!r}")
        elif l.startswith("Mode: "):
            pass
        else:
            raise SystemExit(f"line {i}: unexpected {l!r}")

unpack("sys.ttar")
