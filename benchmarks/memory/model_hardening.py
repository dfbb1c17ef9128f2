"""Peak memory and time of loading hostile model files and templates, for one or more crfkit
checkouts.

Issue 13 (model files are untrusted input).  Every case runs in a fresh child
process; its peak RSS comes from ``os.wait4`` (the child's own ``ru_maxrss``)
and its wall time from the parent.  A child runs under an address-space limit
(``--as-limit``, GiB) so that an unfixed checkout cannot take the machine down:
a case that hits it ends in MemoryError (reported as such), one that runs past
``--timeout`` is killed (reported as ``timeout``).

Cases:

* ``bomb``: ``CRFModel.load`` of a small model whose ``weights`` array is
  replaced by a zlib member of ``--bomb-gib`` GiB of zeros (shape unchanged,
  checksums recomputed: a 2 GiB member is a 2.1 MB file);
* ``info-bomb``: ``crfkit info -m`` that file;
* ``info-devzero``: ``crfkit info -m /dev/zero``;
* ``offset-30M``: ``crfkit train -t`` a template file ``U00:%x[30000000,0]`` on a
  3-sentence column file;
* ``offset-20digits``: the same with ``%x[99999999999999999999,0]``;
* ``offset-5000digits``: a 5,000-digit offset;
* ``info-offset-model``: ``crfkit info -m`` a valid model whose stored templates
  (``meta.templates``) hold ``%x[30000000,0]``;
* ``tag-columns-two``: ``crfkit tag -m`` a valid model whose ``meta.columns`` is
  ``"two"``;
* ``conll-load`` (with ``--model``): median of ``--repeat`` loads of a real
  model (a CoNLL-2000 chunker), and the child's peak RSS;
* ``conll-templates`` (with ``--conll``): median of ``--repeat`` applications of the
  default chunking templates to every sentence of a column file (padded and
  unpadded), and the same with one more template reaching 40 tokens away.

Usage (before/after in the same run, e.g. main's code against a worktree's)::

    python benchmarks/memory/model_hardening.py --src /work/main/src --src src --model conll.crfkit
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import signal
import struct
import subprocess
import sys
import tempfile
import textwrap
import time
import zlib

MAGIC = b"CRFKIT\x00M"


def _split(data: bytes):
    (hl,) = struct.unpack_from("<I", data, len(MAGIC))
    h0 = len(MAGIC) + 4
    return json.loads(data[h0 : h0 + hl].decode()), data[h0 + hl : -32]


def _assemble(header: dict, payload: bytes) -> bytes:
    header["payload_sha256"] = hashlib.sha256(payload).hexdigest()
    hb = json.dumps(header, sort_keys=True).encode()
    head = MAGIC + struct.pack("<I", len(hb)) + hb
    return head + payload + hashlib.sha256(head + payload).digest()


def zeros_member(n_bytes: int) -> bytes:
    """A zlib stream of ``n_bytes`` zero bytes, built without holding them."""
    c = zlib.compressobj(9)
    block = bytes(1 << 24)
    out = []
    left = n_bytes
    while left:
        k = min(left, len(block))
        out.append(c.compress(block[:k]))
        left -= k
    out.append(c.flush())
    return b"".join(out)


def make_small(src: str, path: str, meta: dict) -> None:
    """A valid small model with metadata ``meta``, saved by the checkout ``src``."""
    code = textwrap.dedent(f"""
        import numpy as np
        from crfkit.features.encode import build
        from crfkit.model import CRFModel
        X = [[["U00:a", "U00:b"], ["U00:c"]], [["U00:b"], ["U00:a", "U00:c"]]]
        Y = [["A", "B"], ["B", "A"]]
        space, _ = build(X, Y)
        CRFModel(space, np.linspace(0.1, 1.0, space.n_features), {meta!r}).save({path!r})
    """)
    subprocess.run([sys.executable, "-c", code], check=True, env=dict(os.environ, PYTHONPATH=src))


def make_bomb(src: str, path: str, gib: float) -> None:
    """A valid small model (saved by the checkout ``src``) with its weights replaced by a zeros
    bomb."""
    small = path + ".small"
    make_small(src, small, {"note": "small"})
    with open(small, "rb") as f:
        header, payload = _split(f.read())
    os.unlink(small)
    bomb = zeros_member(int(gib * (1 << 30)))
    header["arrays"]["weights"] = dict(
        header["arrays"]["weights"], offset=len(payload), nbytes=len(bomb)
    )
    with open(path, "wb") as f:
        f.write(_assemble(header, payload + bomb))


def run_child(argv: list[str], src: str, as_limit_gib: float, timeout: float) -> dict:
    """Run ``argv`` with PYTHONPATH=src; its peak RSS (MiB), wall time, exit status and last stderr
    line."""
    limit = int(as_limit_gib * (1 << 30))

    def pre():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        os.setsid()

    env = dict(
        os.environ, PYTHONPATH=src, NUMBA_DISABLE_JIT=os.environ.get("NUMBA_DISABLE_JIT", "0")
    )
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=err, preexec_fn=pre)
        status = None
        killed = False
        while True:
            pid, st, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                status = st
                break
            if time.perf_counter() - t0 > timeout:
                os.killpg(p.pid, signal.SIGKILL)
                pid, st, ru = os.wait4(p.pid, 0)
                killed = True
                break
            time.sleep(0.02)
        wall = time.perf_counter() - t0
        p.returncode = 0  # reaped by wait4
        err.seek(0)
        lines = [ln for ln in err.read().decode(errors="replace").splitlines() if ln.strip()]
    last = lines[-1] if lines else ""
    rc = os.waitstatus_to_exitcode(status) if status is not None else None
    return {
        "rss_mib": ru.ru_maxrss / 1024,
        "wall_s": wall,
        "rc": "timeout" if killed else rc,
        "stderr": last[:240],
        "traceback": any(ln.startswith("Traceback") for ln in lines),
    }


def _py(code: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code)]


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--src", action="append", required=True, help="a checkout's src directory (repeatable)"
    )
    ap.add_argument("--model", help="a real model file to time loading (e.g. a CoNLL-2000 chunker)")
    ap.add_argument(
        "--conll", help="a column file (word POS chunk) to time template application on"
    )
    ap.add_argument(
        "--repeat", type=int, default=7, help="loads of --model per child (median reported)"
    )
    ap.add_argument("--bomb-gib", type=float, default=2.0)
    ap.add_argument(
        "--as-limit", type=float, default=8.0, help="address-space limit of a child, GiB"
    )
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds before a child is killed")
    ap.add_argument(
        "--cases",
        default="bomb,info-bomb,info-devzero,offset-30M,offset-20digits,"
        "offset-5000digits,info-offset-model,tag-columns-two,conll-load,conll-templates",
    )
    ap.add_argument("--workdir", default=None, help="where crafted files go (default: a temp dir)")
    args = ap.parse_args()
    work = args.workdir or tempfile.mkdtemp(prefix="crfkit-hardening-")
    os.makedirs(work, exist_ok=True)
    cases = args.cases.split(",")
    bomb = os.path.join(work, f"bomb-{args.bomb_gib:g}GiB.crfkit")
    if any(c in cases for c in ("bomb", "info-bomb")) and not os.path.exists(bomb):
        make_bomb(os.path.abspath(args.src[-1]), bomb, args.bomb_gib)
    tpl = {}
    for name, offset in (
        ("offset-30M", "30000000"),
        ("offset-20digits", "99999999999999999999"),
        ("offset-5000digits", "1" * 5000),
    ):
        tpl[name] = os.path.join(work, f"{name}.tpl")
        with open(tpl[name], "w") as f:
            f.write(f"U00:%x[{offset},0]\nB\n")
    data = os.path.join(work, "small.txt")
    with open(data, "w") as f:
        f.write("a x A\nb y B\n\nc x A\n\nb y B\na x A\n\n")
    for name, meta in (
        ("info-offset-model", {"templates": "U00:%x[30000000,0]\nB\n", "columns": 2}),
        ("tag-columns-two", {"templates": "U00:%x[0,0]\nB\n", "columns": "two"}),
    ):
        target = os.path.join(work, f"{name}.crfkit")
        if name in cases and not os.path.exists(target):
            make_small(os.path.abspath(args.src[0]), target, meta)
    print(
        f"# bomb file: {bomb} ({os.path.getsize(bomb) if os.path.exists(bomb) else 0} bytes); "
        f"child address-space limit {args.as_limit:g} GiB, timeout {args.timeout:g} s"
    )
    print(
        f"{'case':<18} {'src':<28} {'peak RSS MiB':>12} {'wall s':>8} {'exit':>8}  traceback  last stderr line"
    )
    for case in cases:
        for src in args.src:
            src = os.path.abspath(src)
            if case == "bomb":
                argv = _py(f"""
                    import sys
                    from crfkit.errors import CrfkitError
                    from crfkit.model import CRFModel
                    try:
                        CRFModel.load({bomb!r})
                    except CrfkitError as e:
                        sys.exit(f"CrfkitError: {{e}}")
                """)
            elif case == "info-bomb":
                argv = [sys.executable, "-m", "crfkit", "info", "-m", bomb]
            elif case == "info-devzero":
                argv = [sys.executable, "-m", "crfkit", "info", "-m", "/dev/zero"]
            elif case in tpl:
                argv = [
                    sys.executable,
                    "-m",
                    "crfkit",
                    "train",
                    data,
                    "-t",
                    tpl[case],
                    "-q",
                    "-m",
                    os.path.join(work, "offset-out.crfkit"),
                    "--max-iterations",
                    "5",
                ]
            elif case == "info-offset-model":
                argv = [
                    sys.executable,
                    "-m",
                    "crfkit",
                    "info",
                    "-m",
                    os.path.join(work, f"{case}.crfkit"),
                ]
            elif case == "tag-columns-two":
                argv = [
                    sys.executable,
                    "-m",
                    "crfkit",
                    "tag",
                    "-m",
                    os.path.join(work, f"{case}.crfkit"),
                    data,
                ]
            elif case == "conll-load":
                if not args.model:
                    continue
                argv = _py(f"""
                    import statistics, sys, time
                    from crfkit.model import CRFModel
                    ts = []
                    for _ in range({args.repeat}):
                        t0 = time.perf_counter(); m = CRFModel.load({os.path.abspath(args.model)!r})
                        ts.append(time.perf_counter() - t0)
                    sys.stderr.write(f"median load {{statistics.median(ts):.4f}} s, min {{min(ts):.4f}} s, "
                                     f"{{m.space.n_features}} features\\n")
                """)
            elif case == "conll-templates":
                if not args.conll:
                    continue
                argv = _py(f"""
                    import gzip, statistics, sys, time
                    from crfkit.features.templates import Templates, default_chunking_templates
                    sents, cur = [], []
                    with gzip.open({os.path.abspath(args.conll)!r}, "rt") as f:
                        for line in f:
                            if line.strip():
                                cur.append(line.split()[:-1])
                            elif cur:
                                sents.append(cur); cur = []
                    if cur:
                        sents.append(cur)
                    base = default_chunking_templates()
                    far = Templates.parse(base.source + "U99:%x[-40,0]/%x[40,1]\\n")
                    out = []
                    for label, t in (("default", base), ("default+[-40,40]", far)):
                        for pad in (True, False):
                            ts = []
                            for _ in range({args.repeat}):
                                t0 = time.perf_counter()
                                for s in sents:
                                    t.apply(s, pad=pad)
                                ts.append(time.perf_counter() - t0)
                            out.append(f"{{label}} pad={{pad}}: {{statistics.median(ts):.3f}} s")
                    sys.stderr.write("; ".join(out) + f" ({{len(sents)}} sentences)\\n")
                """)
            else:
                raise SystemExit(f"unknown case {case}")
            r = run_child(argv, src, args.as_limit, args.timeout)
            print(
                f"{case:<18} {src[-28:]:<28} {r['rss_mib']:>12.0f} {r['wall_s']:>8.2f} {str(r['rc']):>8}  "
                f"{'yes' if r['traceback'] else 'no':<9}  {r['stderr']}",
                flush=True,
            )


if __name__ == "__main__":
    main()
