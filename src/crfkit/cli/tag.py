"""``crfkit tag``: its parser, :func:`cmd_tag`, and the client of a ``crfkit serve`` process.

``crfkit tag -m MODEL`` loads the model and hands its options, as a
:class:`~crfkit.tagging.TagOptions`, to :func:`crfkit.tagging.run_tag` (plain Viterbi tagging,
marginals, probabilities, and the decoding options: n-best, constraints, forced labels, posterior
decoding).  ``crfkit tag --server URL`` (:func:`client_tag`) sends the input and the options to a
``crfkit serve`` process (the query parameters of :func:`query_of`) and writes its answer as
``crfkit tag`` would; it imports neither numpy nor numba.  :func:`argv_of` turns such query
parameters back into ``crfkit tag`` arguments.
"""

from __future__ import annotations

import sys

from ..errors import CrfkitError
from ..tagging import SCHEMES, TagOptions, run_tag
from .common import EXIT_ERROR, FORMATS, Output, nonneg_int, pos_int, root_parser

#: options of ``crfkit tag`` the client does not forward: where the input comes from and where the
#: output goes stay on the client's side; the model and the threads are the server's
LOCAL_OPTIONS = frozenset({"file", "model", "output", "server", "threads", "help"})


def cmd_tag(args) -> int:
    """``crfkit tag``; an empty input gives an empty output and exit status 0 (as crf_test), with a
    warning on standard error.  With ``--server URL`` the tagging is a ``crfkit serve`` process's
    (:func:`client_tag`)."""
    if getattr(args, "server", None):
        return client_tag(args)
    if args.model is None:
        raise CrfkitError(
            "crfkit tag needs -m/--model MODEL (or --server URL, a `crfkit serve` process)"
        )
    from ..interop import load_any

    # a crfkit model, or a CRFsuite / CRF++ / Wapiti model detected by its first bytes; one process,
    # one file: decoding in numpy costs less than loading numba's kernels, until the file is long
    return run_tag(TagOptions.of(args), load_any(args.model), engine="adaptive")


def add_parser(sub) -> None:
    """Add ``tag`` to the ``crfkit`` subparsers ``sub``."""
    g = sub.add_parser(
        "tag",
        help="tag a column file with a model",
        description="Tag a column file. Output: the input columns then the predicted label, "
        "tab-separated, a blank line after each sentence (like crf_test).",
    )
    g.add_argument(
        "file",
        metavar="FILE",
        nargs="?",
        default="-",
        help="column file (.gz ok; default/-: stdin)",
    )
    g.add_argument(
        "-m", "--model", help="model file written by `crfkit train` (required unless --server)"
    )
    g.add_argument(
        "--server",
        metavar="URL",
        help="tag with a `crfkit serve` process at URL (http://HOST:PORT) instead of loading a "
        "model: the same output, without the start-up (the model and threads are the server's)",
    )
    g.add_argument(
        "-f",
        "--format",
        choices=FORMATS,
        default="columns",
        help="input format: columns (default), crfsuite (CRFsuite attribute file; output: one "
        "predicted label per line, a blank line after each sequence, as `crfsuite tag`), "
        "or auto (crfsuite for a model without templates, else detected as for train)",
    )
    g.add_argument(
        "-r",
        "--reference",
        action="store_true",
        help="with --format crfsuite: write the file's label, a TAB, then the predicted one "
        "(crfsuite tag -r)",
    )
    g.add_argument(
        "--marginals",
        action="store_true",
        help="write the predicted label as label/probability (its marginal), like crf_test -v1 "
        "(--format crfsuite: label:probability, like crfsuite tag -i)",
    )
    g.add_argument(
        "--all-marginals",
        action="store_true",
        help="after the predicted label, write the marginal of every label as label/probability "
        "(one column per label, in the model's label order), like crf_test -v2 "
        "(--format crfsuite: label:probability, TAB-separated, after the predicted label)",
    )
    g.add_argument(
        "--probability",
        action="store_true",
        help="print '# p' before each sentence: the probability of its predicted labels "
        "(--format crfsuite: '@probability<TAB>p', like crfsuite tag -p)",
    )
    lab = g.add_mutually_exclusive_group()
    lab.add_argument(
        "--labels",
        dest="labels",
        action="store_const",
        const=True,
        default=None,
        help="the input's last column is a gold label (default: detected from the column count)",
    )
    lab.add_argument(
        "--no-labels",
        dest="labels",
        action="store_const",
        const=False,
        help="the input has no gold label column",
    )
    g.add_argument(
        "--eval",
        action="store_true",
        help="print the conlleval report on the gold labels to stderr "
        "(token accuracy when the labels are not chunk tags)",
    )
    g.add_argument(
        "--raw",
        action="store_true",
        help="with --eval: every tag but O is a chunk of its own "
        "(conlleval -r; -r here is --reference)",
    )
    g.add_argument("-o", "--output", metavar="OUT", help="output file (default stdout; .gz ok)")
    g.add_argument("--threads", type=nonneg_int, metavar="N", help="threads (default: all cores)")
    g.add_argument(
        "--batch-tokens",
        type=pos_int,
        default=10_000,
        metavar="N",
        help="read, tag and write about N tokens at a time (whole sentences; default 10000): "
        "memory stays bounded whatever the input's size; the output does not depend on it",
    )
    g.add_argument(
        "--encoding",
        metavar="ENC",
        help="the input's encoding, e.g. utf-16 (default UTF-8); the output is UTF-8",
    )
    add_decoding_arguments(g)
    g.set_defaults(func=cmd_tag)


def nbest_count(text: str) -> int:
    """``-n K``: a whole number in 1..:data:`~crfkit.tagging.decoding.MAX_NBEST`."""
    import argparse

    from ..tagging.decoding import MAX_NBEST

    v = pos_int(text)
    if v > MAX_NBEST:
        raise argparse.ArgumentTypeError(f"at most {MAX_NBEST} sequences per sentence, got {text}")
    return v


def add_decoding_arguments(g) -> None:
    """The decoding options of ``crfkit tag``."""
    g.add_argument(
        "-n",
        "--nbest",
        type=nbest_count,
        default=0,
        metavar="K",
        help="write the K most probable label sequences of each sentence, each after '# k p' "
        "(rank, probability), as crf_test -n (--format crfsuite: after '@nbest<TAB>k<TAB>p'); "
        "K at most 1000",
    )
    g.add_argument(
        "--constraints",
        choices=("none",) + SCHEMES,
        default=None,
        help="forbid the label sequences a chunk scheme rules out: bio (= iob2: O -> I-X, "
        "B-X -> I-Y, I-X first), iobes / bilou (also an open chunk at the end, ...); "
        "in Viterbi, n-best, posterior decoding and the probabilities alike",
    )
    g.add_argument(
        "--forbid",
        action="append",
        metavar="PREV,LABEL",
        help="forbid the label pair PREV -> LABEL (repeatable)",
    )
    g.add_argument(
        "--allowed-column",
        type=pos_int,
        metavar="N",
        help="input column N (1-based) holds each token's allowed labels (A|B; *, ?, _ or empty: "
        "any); not an observation, written back as read",
    )
    g.add_argument(
        "--force",
        action="store_true",
        help="the last column gives labels to keep (? for a free token); the others are decoded "
        "consistently with them (wapiti label --force)",
    )
    g.add_argument(
        "--decode",
        choices=("viterbi", "posterior"),
        default="viterbi",
        help="viterbi (the most probable sequence, default) or posterior (per token the label of "
        "highest marginal, as wapiti label -p; with --constraints, the allowed sequence "
        "with the largest sum of marginals)",
    )


# --------------------------------------------------------------------------- the client of crfkit
# serve


def tag_actions():
    """{long option name without dashes: argparse action} of ``crfkit tag``'s forwardable
    options."""
    parser, sub = root_parser()
    add_parser(sub)
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    tag = sub.choices["tag"]
    out = {}
    for a in tag._actions:
        if a.dest in LOCAL_OPTIONS or not a.option_strings:
            continue
        longs = [s for s in a.option_strings if s.startswith("--")]
        if longs:
            out[longs[0][2:]] = a
    return out


def query_of(args) -> list[tuple[str, str]]:
    """The query parameters that carry ``args`` (a parsed ``crfkit tag`` namespace) to a server:
    every forwardable option whose value is not its default."""
    params = []
    for name, a in tag_actions().items():
        v = getattr(args, a.dest, a.default)
        if v == a.default:
            continue
        if a.nargs == 0:  # store_true / store_const
            if v == a.const:
                params.append((name, "1"))
        elif isinstance(v, list):  # append
            params += [(name, str(x)) for x in v]
        else:
            params.append((name, str(v)))
    return params


def argv_of(params: list[tuple[str, str]], actions=None) -> list[str]:
    """Query parameters -> ``crfkit tag`` arguments (``--name=value``; a flag for ``name=1``)."""
    from ..serving import FLAG_FALSE, FLAG_TRUE, BadRequest

    actions = tag_actions() if actions is None else actions
    argv = []
    for name, value in params:
        key = name.replace("_", "-")
        a = actions.get(key)
        if a is None:
            if key.lstrip("-") in ("m", "model", "o", "output", "threads", "server", "file"):
                raise BadRequest(
                    f"{name}: not an option of a request (the model and the threads are the "
                    "server's; the input is the request's body, the output its answer)"
                )
            raise BadRequest(
                f"{name}: not an option of crfkit tag (options: {', '.join(sorted(actions))})"
            )
        if a.nargs == 0:
            v = value.strip().lower()
            if v in FLAG_TRUE:
                argv.append(f"--{key}")
            elif v not in FLAG_FALSE:
                raise BadRequest(f"{name}={value}: a flag takes 1 or 0")
        else:
            argv.append(f"--{key}={value}")
    return argv


def client_tag(args) -> int:
    """``crfkit tag --server URL``: send the input and the options, write the answer as
    ``crfkit tag`` would, print its standard-error part, return its exit status."""
    import http.client
    from urllib.parse import unquote, urlsplit

    from ..errors import DataError

    if args.model is not None:
        raise CrfkitError("--server tags with the server's model; drop -m/--model")
    if args.threads is not None:
        raise CrfkitError("--server: the threads are the server's (crfkit serve --threads)")
    url = urlsplit(args.server if "://" in args.server else f"http://{args.server}")
    if url.scheme != "http" or not url.hostname:
        raise CrfkitError(f"--server {args.server}: expected http://HOST:PORT")
    name = "<stdin>" if args.file == "-" else args.file
    try:
        if args.file == "-":
            body = sys.stdin.buffer.read()
        elif args.file.endswith(".gz"):
            import gzip

            with gzip.open(args.file, "rb") as f:
                body = f.read()
        else:
            with open(args.file, "rb") as f:
                body = f.read()
    except OSError as e:
        raise DataError(f"cannot read: {e.strerror or e}", name) from None
    from urllib.parse import urlencode

    query = urlencode(query_of(args))
    base = url.path.rstrip("/")
    conn = http.client.HTTPConnection(url.hostname, url.port or 80)
    try:
        try:
            conn.request(
                "POST",
                f"{base}/tag" + (f"?{query}" if query else ""),
                body=body,
                headers={"Content-Type": "text/plain; charset=utf-8"},
            )
            resp = conn.getresponse()
            data = resp.read()
        except OSError as e:
            raise CrfkitError(
                f"cannot reach a crfkit server at {args.server}: {e.strerror or e} (start one "
                "with `crfkit serve -m MODEL`)"
            ) from None
        except http.client.HTTPException as e:
            raise CrfkitError(f"the server at {args.server} broke off: {e!r}") from None
    finally:
        conn.close()
    err = unquote(resp.getheader("X-Crfkit-Stderr") or "")
    status = resp.getheader("X-Crfkit-Status")
    if status is None:  # refused before tagging (400, 404, 413...)
        raise CrfkitError(
            f"the server at {args.server} answered {resp.status}: "
            f"{data.decode('utf-8', errors='replace').strip()}"
        )
    status = int(status)
    if status == 0:
        with Output(args.output) as f:
            raw = getattr(
                f, "buffer", None
            )  # the server's UTF-8 bytes as they came, when f has them
            if raw is not None:
                f.flush()
                raw.write(data)
            else:
                f.write(data.decode("utf-8"))
    if err:
        sys.stderr.write(err)
        sys.stderr.flush()
    return status if status in (0, EXIT_ERROR) else EXIT_ERROR
